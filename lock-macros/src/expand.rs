//! Code generation: the function keeps its signature; its body becomes
//!
//! ```text
//! let __distlock_key = format!("order:{}", &id);          // before the body can move `id`
//! <krate>::__private::run_locked::<ReturnType, _>(options, __distlock_key, async move { body }).await
//! ```
//!
//! The user's body runs as an inner `async move` block, so `return` and `?` leave only that
//! block, and `run_locked` (which awaits the release) always gets control back. The body is
//! awaited in place, never spawned: it may borrow `&self` and need not be `Send`.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{AttrStyle, Ident, ItemFn, LitStr, ReturnType, Type};

use crate::attr::{self, LockArgs, ModeArg, OnLostArg, WaitArg};
use crate::errors::Errors;
use crate::key::{self, Placeholder, Segment, Template};
use crate::valid::{self, Bindings};

pub(crate) fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let missing_key_span = attr::missing_key_span(&args);
    let (args, well_formed) = attr::parse(args, &mut errors);

    let func: ItemFn = match syn::parse2(item.clone()) {
        Ok(func) => func,
        Err(error) => {
            // Not a function with a body: leave the item alone, say why.
            errors.at(
                error.span(),
                "#[distributed_lock] goes on an `async fn` with a body",
            );
            let mut out = item;
            out.extend(errors.into_compile_errors());
            return out;
        }
    };

    valid::check_signature(&func.sig, &mut errors);
    let templates: Option<Vec<Template>> = args.key.as_ref().map(|lits| {
        lits.iter()
            .map(|lit| key::parse(lit, &mut errors))
            .collect()
    });
    if !args.has("key") && well_formed {
        errors.at(
            missing_key_span,
            "missing `key`: name what the lock protects, e.g. \
             #[distributed_lock(key = \"order:<id>\")]",
        );
    }
    let bindings = valid::bindings(&func.sig);
    for template in templates.iter().flatten() {
        valid::check_template(template, &bindings, &mut errors);
    }

    match (templates, args.key.clone()) {
        (Some(templates), Some(lits)) if errors.is_empty() => {
            expand(func, args, &lits, &templates, &bindings)
        }
        _ => {
            // The original function, untouched, so the only errors are ours.
            let mut out = func.into_token_stream();
            out.extend(errors.into_compile_errors());
            out
        }
    }
}

fn expand(
    func: ItemFn,
    args: LockArgs,
    key_lits: &[LitStr],
    templates: &[Template],
    bindings: &Bindings,
) -> TokenStream {
    let krate = args
        .krate
        .clone()
        .map(|path| path.into_token_stream())
        .unwrap_or_else(|| quote!(::distlock));
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = func;
    let (inner_attrs, outer_attrs): (Vec<_>, Vec<_>) = attrs
        .into_iter()
        .partition(|a| matches!(a.style, AttrStyle::Inner(_)));

    // One `format!` per template: the key, rendered before the body can move an argument.
    let keys: Vec<TokenStream> = key_lits
        .iter()
        .zip(templates)
        .map(|(key_lit, template)| {
            let mut format = String::new();
            let mut values = Vec::new();
            for segment in &template.segments {
                match segment {
                    Segment::Text(text) => {
                        format.push_str(&text.replace('{', "{{").replace('}', "}}"))
                    }
                    Segment::Placeholder(placeholder) => {
                        format.push_str("{}");
                        values.push(access(placeholder, bindings));
                    }
                }
            }
            let format = LitStr::new(&format, key_lit.span());
            quote!(::std::format!(#format #(, #values)*))
        })
        .collect();

    let (return_type, return_span) = match &sig.output {
        ReturnType::Default => (quote_spanned!(sig.ident.span()=> ()), sig.ident.span()),
        ReturnType::Type(_, ty) if mentions_impl_trait(ty) => (quote!(_), ty.span()),
        ReturnType::Type(_, ty) => (quote_spanned!(ty.span()=> #ty), ty.span()),
    };
    // Spanned at the return type, so "must return Result<T, E: From<LockError>>" is reported
    // once, on the user's `-> T`.
    // A lease from code is checked at the call, the error naming this function and its key.
    let fail = quote_spanned! {return_span=>
        <#return_type as #krate::__private::LockedReturn>::from_lock_error
    };
    let function = sig.ident.to_string();
    let options = options(&args, &krate, &fail, &function);
    // `client = <expr>`: evaluated at each call, before the body (which may move what it
    // borrows), and cloned (a reference count); the type is checked at the expression.
    let client = match &args.client {
        Some(expr) => quote_spanned! {expr.span()=>
            ::core::option::Option::Some(::core::clone::Clone::clone(
                #krate::__private::AsLockClient::as_lock_client(&(#expr)),
            ))
        },
        None => quote!(::core::option::Option::None),
    };
    let client_var = Ident::new("__distlock_client", Span::call_site());
    // `on_busy`: a function item (nothing in the call's future) giving the call's result for
    // a failed acquisition; `skip`'s is named in a statement of its own spanned at the
    // argument, so "`T: Default` is not satisfied" is said once, there.
    let busy_var = Ident::new("__distlock_busy", Span::call_site());
    let busy = match args.skip_busy {
        Some(span) => quote_spanned! {span=>
            let #busy_var = #krate::__private::skip_when_busy;
        },
        None => quote_spanned! {return_span=>
            let #busy_var = <#return_type as #krate::__private::LockedReturn>::from_lock_error;
        },
    };
    if args.share.is_some() || args.share_expr.is_some() {
        // `share = …`: `run_shared` with the key or keys as a list and the return type's
        // `SharedReturn::codec()` (its bound, `T: Serialize + DeserializeOwned`, checked there
        // alone: a type that cannot be stored is reported once, at the return type).
        let share = match (&args.share, &args.share_expr) {
            (_, Some(expr)) => quote_spanned! {expr.span()=> {
                let share: ::core::time::Duration = #expr;
                share
            }},
            (Some(share), None) => {
                let ms = share.as_millis() as u64;
                quote!(::core::time::Duration::from_millis(#ms))
            }
            (None, None) => unreachable!("checked above"),
        };
        let keys_var = Ident::new("__distlock_keys", Span::call_site());
        let key_var = Ident::new("__distlock_key", Span::call_site());
        let keys_value = if args.key_list {
            quote!(::std::vec![#(#keys),*])
        } else {
            let key = &keys[0];
            quote!(::std::vec![#key])
        };
        // (The options may name `__distlock_key` or `__distlock_keys`: both are bound.)
        let key_binding = if args.key_list || args.lease_expr.is_none() {
            quote!()
        } else {
            quote!(let #key_var: &str = #keys_var[0].as_str();)
        };
        let call = quote_spanned! {return_span=>
            #krate::__private::run_shared(#client_var, #options, #keys_var, #share, async move #block, #busy_var, <#return_type as #krate::__private::SharedReturn>::codec()).await
        };
        return quote! {
            #(#outer_attrs)*
            #vis #sig {
                #(#inner_attrs)*
                let #keys_var: ::std::vec::Vec<::std::string::String> = #keys_value;
                #key_binding
                let #client_var: ::core::option::Option<#krate::LockClient> = #client;
                #busy
                #call
            }
        };
    }
    if args.key_list {
        let keys_var = Ident::new("__distlock_keys", Span::call_site());
        let call = quote_spanned! {return_span=>
            <#return_type as #krate::__private::LockedReturn>::run_locked_all(#client_var, #options, #keys_var, async move #block, #busy_var).await
        };
        return quote! {
            #(#outer_attrs)*
            #vis #sig {
                #(#inner_attrs)*
                let #keys_var: ::std::vec::Vec<::std::string::String> = ::std::vec![#(#keys),*];
                let #client_var: ::core::option::Option<#krate::LockClient> = #client;
                #busy
                #call
            }
        };
    }
    let key_var = Ident::new("__distlock_key", Span::call_site());
    let call = quote_spanned! {return_span=>
        <#return_type as #krate::__private::LockedReturn>::run_locked(#client_var, #options, #key_var, async move #block, #busy_var).await
    };
    let key = &keys[0];
    quote! {
        #(#outer_attrs)*
        #vis #sig {
            #(#inner_attrs)*
            let #key_var: ::std::string::String = #key;
            let #client_var: ::core::option::Option<#krate::LockClient> = #client;
            #busy
            #call
        }
    }
}

/// `&param.field.field` (or `&self.field`), spanned at the placeholder so a missing field or a
/// type without `Display` is reported on the template.
fn access(placeholder: &Placeholder, bindings: &Bindings) -> TokenStream {
    let span = placeholder.span;
    let root = if placeholder.root == "self" {
        let token = bindings
            .receiver
            .map(|mut token| {
                token.span = span;
                token
            })
            .unwrap_or_else(|| syn::token::SelfValue(span));
        quote!(#token)
    } else {
        let mut ident = bindings.names[&placeholder.root].clone();
        ident.set_span(span);
        quote!(#ident)
    };
    let fields = placeholder.fields.iter().map(|field| member(field, span));
    quote_spanned!(span=> &#root #(.#fields)*)
}

fn member(field: &str, span: Span) -> TokenStream {
    if let Ok(index) = field.parse::<u32>() {
        let index = syn::Index { index, span };
        return quote!(#index);
    }
    match syn::parse_str::<Ident>(field) {
        Ok(mut ident) => {
            ident.set_span(span);
            quote!(#ident)
        }
        Err(_) => {
            let ident = Ident::new_raw(field, span);
            quote!(#ident)
        }
    }
}

/// Whether the type contains `impl Trait` anywhere (it cannot be named in a turbofish).
fn mentions_impl_trait(ty: &Type) -> bool {
    fn walk(tokens: TokenStream) -> bool {
        tokens.into_iter().any(|token| match token {
            proc_macro2::TokenTree::Ident(ident) => ident == "impl",
            proc_macro2::TokenTree::Group(group) => walk(group.stream()),
            _ => false,
        })
    }
    walk(ty.to_token_stream())
}

fn options(
    args: &LockArgs,
    krate: &TokenStream,
    fail: &TokenStream,
    function: &str,
) -> TokenStream {
    let millis = |d: std::time::Duration| {
        let ms = d.as_millis() as u64;
        quote!(::core::time::Duration::from_millis(#ms))
    };
    // A duration given in code must be a `Duration`, said at the expression.
    let from_code = |expr: &syn::Expr| {
        quote_spanned! {expr.span()=> {
            let duration: ::core::time::Duration = #expr;
            duration
        }}
    };
    let lease = match args.lease {
        _ if args.lease_expr.is_some() => {
            let lease = args.lease_expr.as_ref().map(from_code);
            let key = if args.key_list {
                quote!(__distlock_keys.first().map_or("", |key| key.as_str()))
            } else {
                quote!(&__distlock_key)
            };
            quote!(::core::option::Option::Some({
                let lease = #lease;
                if let ::core::option::Option::Some(error) =
                    #krate::__private::lease_out_of_range(lease, #function, #key)
                {
                    return #fail(error);
                }
                lease
            }))
        }
        Some(lease) => {
            let lease = millis(lease);
            quote!(::core::option::Option::Some(#lease))
        }
        None => quote!(::core::option::Option::None),
    };
    let wait = match &args.wait {
        _ if args.wait_expr.is_some() => {
            let wait = args.wait_expr.as_ref().map(from_code);
            quote!(#krate::__private::WaitFor::Up(#wait))
        }
        None => quote!(#krate::__private::WaitFor::Default),
        Some(WaitArg::Forever) => quote!(#krate::__private::WaitFor::Forever),
        Some(WaitArg::Up(wait)) => {
            let wait = millis(*wait);
            quote!(#krate::__private::WaitFor::Up(#wait))
        }
    };
    let renew = args.renew.unwrap_or(true);
    let on_lost = match args.on_lost.unwrap_or(OnLostArg::Abort) {
        OnLostArg::Abort => quote!(#krate::__private::OnLost::Abort),
        OnLostArg::Continue => quote!(#krate::__private::OnLost::Continue),
    };
    let fencing = match args.fencing {
        Some(fencing) => quote!(::core::option::Option::Some(#fencing)),
        None => quote!(::core::option::Option::None),
    };
    let fair = args.fair.unwrap_or(false);
    let mode = match args.mode {
        Some(ModeArg::Read) => quote!(#krate::__private::LockMode::Read),
        Some(ModeArg::Write) | None => quote!(#krate::__private::LockMode::Write),
    };
    let permits = match (&args.permits_expr, args.permits) {
        // A constant expression: its type (`u16`) and its value (not zero) are checked by the
        // compiler in an inline `const` block, the error at the expression.
        (Some(expr), _) => quote_spanned! {expr.span()=>
            ::core::option::Option::Some(const {
                let permits: ::core::primitive::u16 = #expr;
                match ::core::num::NonZeroU16::new(permits) {
                    ::core::option::Option::Some(permits) => permits,
                    ::core::option::Option::None => ::core::panic!(
                        "`permits` is 0: a semaphore of no permits could never be acquired; give at least 1"
                    ),
                }
            })
        },
        // Checked non-zero at compile time: `new` returns `Some`.
        (None, Some(n)) => quote!(::core::num::NonZeroU16::new(#n)),
        (None, None) => quote!(::core::option::Option::None),
    };
    // At most the longest lease (checked: 7 days), which fits in a `u32` of milliseconds.
    let min_hold = match &args.min_hold_expr {
        // Saturated at `u32::MAX` ms (49 days): longer than any lease, refused at the call.
        Some(expr) => {
            let min_hold = from_code(expr);
            quote!(::core::primitive::u32::try_from(#min_hold.as_millis()).unwrap_or(::core::primitive::u32::MAX))
        }
        None => {
            let ms = args.min_hold.unwrap_or_default().as_millis() as u32;
            quote!(#ms)
        }
    };
    // A delay from code is checked (at most 7 days) when the call is made: saturated at
    // `u32::MAX` ms (49 days), which that check refuses.
    let lock_delay = match (&args.lock_delay_expr, args.lock_delay) {
        (Some(expr), _) => {
            let delay = from_code(expr);
            quote!(::core::option::Option::Some(::core::primitive::u32::try_from(#delay.as_millis()).unwrap_or(::core::primitive::u32::MAX)))
        }
        (None, Some(delay)) => {
            // Checked at most 7 days: fits.
            let ms = delay.as_millis() as u32;
            quote!(::core::option::Option::Some(#ms))
        }
        (None, None) => quote!(::core::option::Option::None),
    };
    let max_hold = match &args.max_hold_expr {
        // Saturated at `u32::MAX` ms (49 days), refused at the call; zero (no cap) is refused as
        // shorter than the lease.
        Some(expr) => {
            let max_hold = from_code(expr);
            quote!(::core::primitive::u32::try_from(#max_hold.as_millis()).unwrap_or(::core::primitive::u32::MAX).max(1))
        }
        None => {
            // Checked at most 49 days: fits.
            let ms = args.max_hold.unwrap_or_default().as_millis() as u32;
            quote!(#ms)
        }
    };
    quote! {
        #krate::__private::LockOptions {
            lease: #lease,
            wait: #wait,
            renew: #renew,
            on_lost: #on_lost,
            fencing: #fencing,
            fair: #fair,
            mode: #mode,
            permits: #permits,
            min_hold_ms: #min_hold,
            max_hold_ms: #max_hold,
            lock_delay_ms: #lock_delay,
        }
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    /// Expands the README's example; prints it (`cargo test -p lock-macros -- --nocapture`
    /// shows the expansion) and checks its parts.
    #[test]
    fn expansion_of_the_readme_example() {
        let expanded = super::distributed_lock(
            quote!(key = "order:<id>", lease = "10s", wait = "2s"),
            quote! {
                async fn next_order_id(id: u64) -> Result<u64, LockError> {
                    Ok(id + 1)
                }
            },
        )
        .to_string();
        println!("{expanded}");
        for part in [
            "async fn next_order_id (id : u64) -> Result < u64 , LockError >",
            "let __distlock_key : :: std :: string :: String = :: std :: format ! (\"order:{}\" , & id)",
            "< Result < u64 , LockError > as :: distlock :: __private :: LockedReturn > :: run_locked",
            "lease : :: core :: option :: Option :: Some (:: core :: time :: Duration :: from_millis (10000u64))",
            "wait : :: distlock :: __private :: WaitFor :: Up (:: core :: time :: Duration :: from_millis (2000u64))",
            "on_lost : :: distlock :: __private :: OnLost :: Abort",
            "async move { Ok (id + 1) }",
        ] {
            assert!(expanded.contains(part), "missing `{part}` in\n{expanded}");
        }
    }
}
