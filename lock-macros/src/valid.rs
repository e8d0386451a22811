//! Checks the function and the key template against each other.

use std::collections::BTreeMap;

use syn::spanned::Spanned;
use syn::{FnArg, Ident, Pat, Signature};

use crate::errors::{Errors, closest};
use crate::key::Template;

/// The names a key template may use: every binding of the parameters, and `self`.
pub(crate) struct Bindings {
    pub names: BTreeMap<String, Ident>,
    pub receiver: Option<syn::token::SelfValue>,
}

pub(crate) fn bindings(sig: &Signature) -> Bindings {
    let mut names = BTreeMap::new();
    let mut receiver = None;
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(r) => receiver = Some(r.self_token),
            FnArg::Typed(typed) => collect(&typed.pat, &mut names),
        }
    }
    Bindings { names, receiver }
}

fn collect(pat: &Pat, names: &mut BTreeMap<String, Ident>) {
    use syn::ext::IdentExt;
    match pat {
        Pat::Ident(p) => {
            names.insert(p.ident.unraw().to_string(), p.ident.clone());
            if let Some((_, sub)) = &p.subpat {
                collect(sub, names);
            }
        }
        Pat::Tuple(p) => p.elems.iter().for_each(|p| collect(p, names)),
        Pat::TupleStruct(p) => p.elems.iter().for_each(|p| collect(p, names)),
        Pat::Struct(p) => p.fields.iter().for_each(|f| collect(&f.pat, names)),
        Pat::Slice(p) => p.elems.iter().for_each(|p| collect(p, names)),
        Pat::Reference(p) => collect(&p.pat, names),
        Pat::Paren(p) => collect(&p.pat, names),
        Pat::Type(p) => collect(&p.pat, names),
        _ => {}
    }
}

/// `async`, not `const`.
pub(crate) fn check_signature(sig: &Signature, errors: &mut Errors) {
    if let Some(constness) = &sig.constness {
        errors.at(
            constness.span(),
            "#[distributed_lock] cannot be used on a `const fn`: taking a lock happens at run time",
        );
    }
    if sig.asyncness.is_none() {
        errors.at(
            sig.fn_token.span(),
            "#[distributed_lock] works on `async fn` only: the lock is held across the body's \
             `.await`s; write `async fn`",
        );
    }
}

/// Every placeholder names a parameter (or `self` in a method).
pub(crate) fn check_template(template: &Template, bindings: &Bindings, errors: &mut Errors) {
    for placeholder in template.placeholders() {
        let root = placeholder.root.as_str();
        if root == "self" {
            if bindings.receiver.is_none() {
                errors.at(
                    placeholder.span,
                    format!(
                        "`{}` uses `self`, but this function has no `self` parameter",
                        placeholder.text
                    ),
                );
            }
            continue;
        }
        if bindings.names.contains_key(root) {
            continue;
        }
        let mut candidates: Vec<&str> = bindings.names.keys().map(String::as_str).collect();
        if bindings.receiver.is_some() {
            candidates.push("self");
        }
        let hint = match closest(root, candidates.iter().copied()) {
            Some(close) => format!(" (did you mean `{close}`?)"),
            None if candidates.is_empty() => " (the function has no parameters)".to_string(),
            None => format!("; the parameters are: {}", candidates.join(", ")),
        };
        errors.at(
            placeholder.span,
            format!(
                "`{}` in the key template names no parameter of this function{hint}",
                placeholder.text
            ),
        );
    }
}
