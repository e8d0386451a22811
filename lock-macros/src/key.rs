//! The key template: `"order:<id>"`, `"<user.id>:<self.shard>"`, `"a<<b>>c"` (literal `<b>`).

use proc_macro2::Span;
use syn::LitStr;

use crate::errors::Errors;

pub(crate) enum Segment {
    Text(String),
    Placeholder(Placeholder),
}

/// `<root.field.field>` inside the template.
pub(crate) struct Placeholder {
    pub root: String,
    pub fields: Vec<String>,
    /// As written, with the angle brackets, for messages.
    pub text: String,
    /// Inside the string literal where the compiler allows it, else the whole literal.
    pub span: Span,
}

pub(crate) struct Template {
    pub segments: Vec<Segment>,
}

impl Template {
    pub(crate) fn placeholders(&self) -> impl Iterator<Item = &Placeholder> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Placeholder(p) => Some(p),
            Segment::Text(_) => None,
        })
    }
}

/// The span of bytes `start..end` of the literal's value: a sub-span on compilers that support
/// it and when the source has no escapes (so offsets match), otherwise the whole literal.
fn span_of(lit: &LitStr, start: usize, end: usize) -> Span {
    let value = lit.value();
    let token = lit.token();
    if token.to_string() == format!("\"{value}\"")
        && let Some(span) = token.subspan(start + 1..end + 1)
    {
        return span;
    }
    lit.span()
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
}

/// Parses the template, reporting every malformed placeholder.
pub(crate) fn parse(lit: &LitStr, errors: &mut Errors) -> Template {
    let value = lit.value();
    let mut segments = Vec::new();
    let mut text = String::new();
    let mut rest = value.char_indices().peekable();
    if value.is_empty() {
        errors.at(
            lit.span(),
            "the key template is empty: name what the lock protects, e.g. key = \"order:<id>\"",
        );
    }
    while let Some((i, c)) = rest.next() {
        match c {
            '<' if rest.peek().map(|&(_, c)| c) == Some('<') => {
                rest.next();
                text.push('<');
            }
            '>' if rest.peek().map(|&(_, c)| c) == Some('>') => {
                rest.next();
                text.push('>');
            }
            '>' => errors.at(
                span_of(lit, i, i + 1),
                format!("unmatched `>` in key template {value:?}: write `>>` for a literal `>`"),
            ),
            '<' => {
                let after = &value[i + 1..];
                match after.find(['<', '>']) {
                    Some(j) if after.as_bytes()[j] == b'>' => {
                        let inner = &after[..j];
                        let end = i + 1 + j + 1;
                        // Skip the placeholder's characters.
                        while rest.peek().is_some_and(|&(k, _)| k < end) {
                            rest.next();
                        }
                        let span = span_of(lit, i, end);
                        if let Some(placeholder) = placeholder(inner, span, errors) {
                            if !text.is_empty() {
                                segments.push(Segment::Text(std::mem::take(&mut text)));
                            }
                            segments.push(Segment::Placeholder(placeholder));
                        }
                    }
                    _ => {
                        let upto = after.find('<').map_or(value.len(), |j| i + 1 + j);
                        errors.at(
                            span_of(lit, i, upto),
                            format!(
                                "unclosed placeholder `{}` in key template {value:?}: close it \
                                 with `>`, or write `<<` for a literal `<`",
                                &value[i..upto]
                            ),
                        );
                    }
                }
            }
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        segments.push(Segment::Text(text));
    }
    Template { segments }
}

fn placeholder(inner: &str, span: Span, errors: &mut Errors) -> Option<Placeholder> {
    let text = format!("<{inner}>");
    if inner.is_empty() {
        errors.at(
            span,
            "empty placeholder `<>` in key template: name a parameter, e.g. `<id>`, \
             or write `<<` and `>>` for literal angle brackets",
        );
        return None;
    }
    let mut parts = inner.split('.');
    let root = parts.next().unwrap_or_default();
    let fields: Vec<&str> = parts.collect();
    let valid_root = is_identifier(root);
    let valid_fields = fields
        .iter()
        .all(|f| is_identifier(f) || (!f.is_empty() && f.bytes().all(|b| b.is_ascii_digit())));
    if !valid_root || !valid_fields {
        errors.at(
            span,
            format!(
                "invalid placeholder `{text}`: expected a parameter name or a field path, \
                 e.g. `<id>`, `<user.id>` or `<self.shard>`"
            ),
        );
        return None;
    }
    Some(Placeholder {
        root: root.to_owned(),
        fields: fields.into_iter().map(str::to_owned).collect(),
        text,
        span,
    })
}
