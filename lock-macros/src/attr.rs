//! Parsing `#[distributed_lock(key = "…", lease = "…", …)]`.

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Token};

use crate::duration;
use crate::errors::{Errors, closest};

/// Every argument the attribute takes.
pub(crate) const ARGUMENTS: &[&str] = &[
    "key",
    "lease",
    "wait",
    "renew",
    "on_lost",
    "fencing",
    "fair",
    "mode",
    "permits",
    "min_hold",
    "max_hold",
    "lock_delay",
    "on_busy",
    "share",
    "client",
    "crate",
];

/// The values `mode` takes.
const MODES: &[&str] = &["read", "write"];

/// The shortest lease the runtime accepts (its `LockClient::MIN_LEASE`).
const MIN_LEASE: Duration = Duration::from_millis(10);
/// The longest lease the runtime accepts (its `LockClient::MAX_LEASE`).
const MAX_LEASE: Duration = Duration::from_secs(7 * 24 * 3600);
/// The longest `share` the runtime takes (a year).
const MAX_SHARE: Duration = Duration::from_secs(365 * 24 * 3600);
/// The longest `max_hold`: `u32::MAX` milliseconds (49 days), as the runtime keeps it.
const MAX_HOLD_CAP: Duration = Duration::from_millis(u32::MAX as u64);

pub(crate) enum WaitArg {
    Up(Duration),
    Forever,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ModeArg {
    Read,
    Write,
}

#[derive(Clone, Copy)]
pub(crate) enum OnLostArg {
    Abort,
    Continue,
}

/// The parsed arguments; each with the span it came from.
#[derive(Default)]
pub(crate) struct LockArgs {
    /// `key = "…"`: one template; `key = ["…", "…"]`: several (`key_list`).
    pub key: Option<Vec<LitStr>>,
    /// Whether `key` was given as a list (even of one template).
    pub key_list: bool,
    /// Where `key` was written, for errors about its combination with other arguments.
    key_span: Option<Span>,
    pub lease: Option<Duration>,
    pub wait: Option<WaitArg>,
    pub renew: Option<bool>,
    pub on_lost: Option<OnLostArg>,
    pub fencing: Option<bool>,
    pub fair: Option<bool>,
    pub mode: Option<ModeArg>,
    /// Where `mode` was written, for errors about its combination with other arguments.
    mode_span: Option<Span>,
    /// `permits = n`: a permit of a semaphore of `n` (at least 1).
    pub permits: Option<u16>,
    /// `permits = <expr>`: a constant expression of type `u16`, checked non-zero when the
    /// crate is compiled (an inline `const` block).
    pub permits_expr: Option<Expr>,
    /// Where `permits` was written.
    permits_span: Option<Span>,
    /// `min_hold = "…"`: held at least this long after the grant.
    pub min_hold: Option<Duration>,
    /// Where `min_hold`'s value was written.
    min_hold_span: Option<Span>,
    /// `max_hold = "…"`: renewal stops this long after the grant.
    pub max_hold: Option<Duration>,
    /// Where `max_hold`'s value was written.
    max_hold_span: Option<Span>,
    /// `lock_delay = "…"`: after an involuntary loss, the key stays taken this much longer.
    pub lock_delay: Option<Duration>,
    /// `share = "…"`: the body's `Ok` result is stored this long for every caller.
    pub share: Option<Duration>,
    /// `share = <expr>`: a `Duration` from code, checked at the call.
    pub share_expr: Option<Expr>,
    /// Where `share` was written.
    share_span: Option<Span>,
    pub krate: Option<syn::Path>,
    /// `client = <expr>`: the call's lock client, evaluated at each call.
    pub client: Option<Expr>,
    /// `lease`, `wait`, `min_hold`, `max_hold` given in code (a `const`, an expression of type
    /// `Duration`): checked when the call is made, not here.
    pub lease_expr: Option<Expr>,
    pub wait_expr: Option<Expr>,
    pub min_hold_expr: Option<Expr>,
    pub max_hold_expr: Option<Expr>,
    pub lock_delay_expr: Option<Expr>,
    /// `on_busy = "skip"`: where it was written (the `Default` check points there).
    pub skip_busy: Option<Span>,
    seen: Vec<String>,
}

struct Arg {
    name: Ident,
    value: Expr,
}

fn parse_arg(input: ParseStream<'_>) -> syn::Result<Arg> {
    // `crate` is a keyword: accept any identifier-like token as the name.
    let name = Ident::parse_any(input)?;
    input.parse::<Token![=]>().map_err(|e| {
        syn::Error::new(
            e.span(),
            format!("expected `=` after `{name}`: write `{name} = \"…\"`"),
        )
    })?;
    let value = input.parse()?;
    Ok(Arg { name, value })
}

/// Parses the attribute's arguments, collecting every error. The bool is `false` when the
/// arguments are malformed beyond per-argument errors (so "missing `key`" would be noise).
pub(crate) fn parse(args: TokenStream, errors: &mut Errors) -> (LockArgs, bool) {
    let parser = Punctuated::<Arg, Token![,]>::parse_terminated_with;
    let list = match (|input: ParseStream<'_>| parser(input, parse_arg)).parse2(args) {
        Ok(list) => list,
        Err(error) => {
            errors.push(syn::Error::new(
                error.span(),
                format!(
                    "{error}; the attribute takes `name = value` pairs, e.g. \
                     #[distributed_lock(key = \"order:<id>\", lease = \"10s\")]"
                ),
            ));
            return (LockArgs::default(), false);
        }
    };
    let mut parsed = LockArgs::default();
    for arg in list {
        parsed.apply(arg, errors);
    }
    if parsed.mode == Some(ModeArg::Read)
        && parsed.fair == Some(true)
        && let Some(span) = parsed.mode_span
    {
        errors.at(
            span,
            "a read lock cannot be fair: readers do not queue behind each other, and a waiting \
             writer already stops new readers from joining; drop `fair = true` or `mode = \"read\"`",
        );
    }
    if let Some(span) = parsed.permits_span {
        if parsed.mode.is_some() {
            errors.at(
                span,
                "`permits` takes a permit of a semaphore, which has no read or write side: drop \
                 `mode` (or `permits`, for a read/write lock)",
            );
        }
        if parsed.fair == Some(true) {
            errors.at(
                span,
                "a semaphore cannot be fair here (on zk:// and etcd:// its waiters are served in \
                 arrival order already): drop `fair = true`",
            );
        }
    }
    if let (Some(span), Some(min_hold), Some(lease)) =
        (parsed.min_hold_span, parsed.min_hold, parsed.lease)
        && min_hold > lease
    {
        errors.at(
            span,
            format!(
                "min_hold {min_hold:?} is longer than the lease {lease:?}: a lock released early \
                 is kept until min_hold without renewal, so it cannot outlive its lease; make \
                 `lease` at least {min_hold:?}, or `min_hold` shorter"
            ),
        );
    }
    if let (Some(span), Some(max_hold), Some(lease)) =
        (parsed.max_hold_span, parsed.max_hold, parsed.lease)
        && max_hold < lease
    {
        errors.at(
            span,
            format!(
                "max_hold {max_hold:?} is shorter than the lease {lease:?}: renewal stops at \
                 max_hold, which must leave the lease to run at least once; make `max_hold` at \
                 least {lease:?}, or `lease` shorter"
            ),
        );
    }
    if let Some(span) = parsed.share_span {
        if parsed.mode == Some(ModeArg::Read) {
            errors.at(
                span,
                "`share` runs the body once for every caller, under the write lock: drop \
                 `mode = \"read\"` (readers all run their body anyway)",
            );
        }
        if parsed.permits_span.is_some() {
            errors.at(
                span,
                "`share` runs the body once for every caller, under the lock: a semaphore \
                 runs several at once, so drop `permits` (or `share`)",
            );
        }
    }
    if let (Some(span), true, Some(_)) = (parsed.permits_span, parsed.key_list, &parsed.key) {
        errors.at(
            span,
            "`permits` takes a permit of one semaphore, and `key` names several keys: a semaphore \
             is one key (give `key` one template)",
        );
    }
    if let (Some(span), true, true) = (parsed.key_span, parsed.key_list, parsed.fair == Some(true))
    {
        errors.at(
            span,
            "several keys cannot be taken as one fair lock (each key's queue orders its own \
             waiters): drop `fair = true`",
        );
    }
    (parsed, true)
}

/// `key = ["…", …]`: string literals, at least one, none twice.
fn key_list(list: &syn::ExprArray, errors: &mut Errors) -> Option<Vec<LitStr>> {
    if list.elems.is_empty() {
        errors.push(syn::Error::new_spanned(
            list,
            "`key = []` names no key: give at least one template, e.g. \
             key = [\"account:<from>\", \"account:<to>\"]",
        ));
        return None;
    }
    let mut templates: Vec<LitStr> = Vec::with_capacity(list.elems.len());
    let mut ok = true;
    for element in &list.elems {
        match element {
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) => {
                if templates.iter().any(|seen| seen.value() == lit.value()) {
                    errors.at(
                        lit.span(),
                        format!(
                            "the key template {:?} is listed twice: each key is taken once, \
                             drop the repeat",
                            lit.value()
                        ),
                    );
                    ok = false;
                }
                templates.push(lit.clone());
            }
            other => {
                errors.push(syn::Error::new_spanned(
                    other,
                    "each key in `key = [...]` is a template string, e.g. \
                     key = [\"account:<from>\", \"account:<to>\"]",
                ));
                ok = false;
            }
        }
    }
    ok.then_some(templates)
}

/// Whether `value` is a string literal (a duration the macro checks) rather than code (a
/// `Duration` the call checks).
fn is_string(value: &Expr) -> bool {
    matches!(
        value,
        Expr::Lit(ExprLit {
            lit: Lit::Str(_),
            ..
        })
    )
}

fn string_value<'a>(arg: &'a Arg, errors: &mut Errors, example: &str) -> Option<&'a LitStr> {
    match &arg.value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Some(lit),
        other => {
            errors.push(syn::Error::new_spanned(
                other,
                format!(
                    "`{}` takes a string, e.g. {} = {example}",
                    arg.name, arg.name
                ),
            ));
            None
        }
    }
}

fn bool_value(arg: &Arg, errors: &mut Errors) -> Option<bool> {
    match &arg.value {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(lit),
            ..
        }) => Some(lit.value),
        other => {
            errors.push(syn::Error::new_spanned(
                other,
                format!("`{}` takes `true` or `false`", arg.name),
            ));
            None
        }
    }
}

fn duration_value(lit: &LitStr, errors: &mut Errors) -> Option<Duration> {
    match duration::parse(&lit.value()) {
        Ok(duration) => Some(duration),
        Err(message) => {
            errors.at(lit.span(), message);
            None
        }
    }
}

impl LockArgs {
    /// Whether the argument was written at all (valid or not).
    pub(crate) fn has(&self, name: &str) -> bool {
        self.seen.iter().any(|seen| seen == name)
    }

    fn apply(&mut self, arg: Arg, errors: &mut Errors) {
        let name = arg.name.unraw().to_string();
        let span = arg.name.span();
        if !ARGUMENTS.contains(&name.as_str()) {
            let hint = closest(&name, ARGUMENTS.iter().copied())
                .map(|c| format!(" (did you mean `{c}`?)"))
                .unwrap_or_default();
            errors.at(
                span,
                format!(
                    "unknown argument `{name}`{hint}; #[distributed_lock] takes: {}",
                    ARGUMENTS.join(", ")
                ),
            );
            return;
        }
        if self.seen.contains(&name) {
            errors.at(
                span,
                format!("duplicate argument `{name}`: it is already set"),
            );
            return;
        }
        self.seen.push(name.clone());
        match name.as_str() {
            "key" => {
                self.key_span = Some(arg.name.span());
                if let Expr::Array(list) = &arg.value {
                    self.key_list = true;
                    self.key = key_list(list, errors);
                } else {
                    self.key = string_value(&arg, errors, "\"order:<id>\"")
                        .cloned()
                        .map(|lit| vec![lit]);
                }
            }
            "lease" if !is_string(&arg.value) => self.lease_expr = Some(arg.value),
            "wait" if !is_string(&arg.value) => self.wait_expr = Some(arg.value),
            "min_hold" if !is_string(&arg.value) => self.min_hold_expr = Some(arg.value),
            "max_hold" if !is_string(&arg.value) => self.max_hold_expr = Some(arg.value),
            "lock_delay" if !is_string(&arg.value) => self.lock_delay_expr = Some(arg.value),
            "share" if !is_string(&arg.value) => {
                self.share_span = Some(arg.name.span());
                self.share_expr = Some(arg.value)
            }
            "share" => {
                let Some(lit) = string_value(&arg, errors, "\"60s\"") else {
                    return;
                };
                self.share_span = Some(lit.span());
                match duration_value(lit, errors) {
                    Some(share) if share < Duration::from_millis(1) => errors.at(
                        lit.span(),
                        "`share` must be at least 1ms: how long every caller gets the stored \
                         result, e.g. \"60s\"",
                    ),
                    Some(share) if share > MAX_SHARE => errors.at(
                        lit.span(),
                        format!(
                            "share {:?} is too long: at most 365 days (`client.forget_shared(key)` \
                             drops a stored result sooner)",
                            lit.value()
                        ),
                    ),
                    share => self.share = share,
                }
            }
            "lease" => {
                let Some(lit) = string_value(&arg, errors, "\"10s\"") else {
                    return;
                };
                let Some(lease) = duration_value(lit, errors) else {
                    return;
                };
                if lease.is_zero() {
                    errors.at(lit.span(), "`lease` must be longer than zero, e.g. \"10s\"");
                } else if lease < MIN_LEASE {
                    errors.at(
                        lit.span(),
                        format!(
                            "lease {:?} is too short to renew: the watchdog renews every lease/3 \
                             and needs a round trip, so the lease must be at least 10ms",
                            lit.value()
                        ),
                    );
                } else if lease > MAX_LEASE {
                    errors.at(
                        lit.span(),
                        format!(
                            "lease {:?} is too long: a lock whose holder died stays taken for a \
                             whole lease, so it must be at most 7 days; keep it short and let \
                             renewal extend it while the function runs",
                            lit.value()
                        ),
                    );
                } else {
                    self.lease = Some(lease);
                }
            }
            "wait" => {
                let Some(lit) = string_value(&arg, errors, "\"2s\" (or \"0s\", \"forever\")")
                else {
                    return;
                };
                if lit.value() == "forever" {
                    self.wait = Some(WaitArg::Forever);
                } else if let Some(wait) = duration_value(lit, errors) {
                    self.wait = Some(WaitArg::Up(wait));
                }
            }
            "min_hold" => {
                let Some(lit) = string_value(&arg, errors, "\"55s\"") else {
                    return;
                };
                self.min_hold_span = Some(lit.span());
                match duration_value(lit, errors) {
                    Some(min_hold) if min_hold > MAX_LEASE => errors.at(
                        lit.span(),
                        format!(
                            "min_hold {:?} is longer than any lease (at most 7 days): the lock \
                             is kept that long without renewal",
                            lit.value()
                        ),
                    ),
                    min_hold => self.min_hold = min_hold,
                }
            }
            "max_hold" => {
                let Some(lit) = string_value(&arg, errors, "\"1h\"") else {
                    return;
                };
                self.max_hold_span = Some(lit.span());
                match duration_value(lit, errors) {
                    Some(max_hold) if max_hold > MAX_HOLD_CAP => errors.at(
                        lit.span(),
                        format!(
                            "max_hold {:?} is longer than 49 days (u32::MAX milliseconds), the \
                             longest kept; leave `max_hold` out for no cap",
                            lit.value()
                        ),
                    ),
                    max_hold => self.max_hold = max_hold,
                }
            }
            "lock_delay" => {
                let Some(lit) = string_value(&arg, errors, "\"5s\"") else {
                    return;
                };
                match duration_value(lit, errors) {
                    Some(delay) if delay > MAX_LEASE => errors.at(
                        lit.span(),
                        format!(
                            "lock_delay {:?} is too long: at most 7 days (after a holder dies, \
                             the key stays taken its lease plus the delay)",
                            lit.value()
                        ),
                    ),
                    delay => self.lock_delay = delay,
                }
            }
            "renew" => self.renew = bool_value(&arg, errors),
            "fencing" => self.fencing = bool_value(&arg, errors),
            "fair" => self.fair = bool_value(&arg, errors),
            "permits" => {
                let lit = match &arg.value {
                    Expr::Lit(ExprLit {
                        lit: Lit::Int(lit), ..
                    }) => lit,
                    Expr::Lit(other) => {
                        errors.push(syn::Error::new_spanned(
                            other,
                            "`permits` takes a whole number of permits, e.g. permits = 4, or a \
                             constant of type `u16`",
                        ));
                        return;
                    }
                    other => {
                        // A constant expression (`permits = POOL`, `permits = 2 * N`): its
                        // type and non-zero value are checked by the compiler.
                        self.permits_span = Some(other.span());
                        self.permits_expr = Some(other.clone());
                        return;
                    }
                };
                self.permits_span = Some(lit.span());
                match lit.base10_parse::<u16>() {
                    Ok(0) => errors.at(
                        lit.span(),
                        "`permits = 0`: a semaphore of no permits could never be acquired; give \
                         at least 1 (the most holders at once)",
                    ),
                    Ok(n) => self.permits = Some(n),
                    Err(_) => errors.at(
                        lit.span(),
                        format!(
                            "`permits = {lit}` is not a number of permits: expected a whole \
                             number from 1 to {}",
                            u16::MAX
                        ),
                    ),
                }
            }
            "mode" => {
                let Some(lit) = string_value(&arg, errors, "\"read\"") else {
                    return;
                };
                self.mode_span = Some(lit.span());
                self.mode = match lit.value().as_str() {
                    "read" => Some(ModeArg::Read),
                    "write" => Some(ModeArg::Write),
                    other => {
                        let hint = closest(other, MODES.iter().copied())
                            .map(|c| format!(" (did you mean \"{c}\"?)"))
                            .unwrap_or_default();
                        errors.at(
                            lit.span(),
                            format!(
                                "unknown `mode` value {other:?}{hint}: expected \"read\" (a \
                                 shared lock: many readers, no writer) or \"write\" (the \
                                 plain, exclusive lock; the default)"
                            ),
                        );
                        None
                    }
                };
            }
            "on_lost" => {
                let Some(lit) = string_value(&arg, errors, "\"abort\"") else {
                    return;
                };
                self.on_lost = match lit.value().as_str() {
                    "abort" => Some(OnLostArg::Abort),
                    "continue" => Some(OnLostArg::Continue),
                    other => {
                        errors.at(
                            lit.span(),
                            format!(
                                "unknown `on_lost` value {other:?}: expected \"abort\" (stop the \
                                 body and return Err(LockError::Lost)) or \"continue\" (let it \
                                 finish; distlock::current().is_lost() tells)"
                            ),
                        );
                        None
                    }
                };
            }
            "on_busy" => {
                let Some(lit) = string_value(&arg, errors, "\"skip\"") else {
                    return;
                };
                match lit.value().as_str() {
                    "skip" => self.skip_busy = Some(lit.span()),
                    "error" => {}
                    other => {
                        let hint = closest(other, ["skip", "error"])
                            .map(|c| format!(" (did you mean \"{c}\"?)"))
                            .unwrap_or_default();
                        errors.at(
                            lit.span(),
                            format!(
                                "unknown `on_busy` value {other:?}{hint}: expected \"skip\" \
                                 (a lock still busy when `wait` ends returns \
                                 Ok(Default::default()) without running the body) or \"error\" \
                                 (it returns Err(LockError::Busy) or Err(LockError::Timeout), the default)"
                            ),
                        );
                    }
                }
            }
            "client" => self.client = Some(arg.value),
            "crate" => {
                let Some(lit) = string_value(&arg, errors, "\"distlock\"") else {
                    return;
                };
                match lit.parse::<syn::Path>() {
                    Ok(path) => self.krate = Some(path),
                    Err(_) => errors.at(
                        lit.span(),
                        format!(
                            "`crate` must be a path, e.g. \"distlock\" or \"::my_locks\", not {:?}",
                            lit.value()
                        ),
                    ),
                }
            }
            _ => unreachable!("every name in ARGUMENTS is handled"),
        }
    }
}

/// The span of the whole attribute arguments, for "missing `key`".
pub(crate) fn missing_key_span(args: &TokenStream) -> Span {
    args.clone()
        .into_iter()
        .next()
        .map(|t| t.span())
        .unwrap_or_else(Span::call_site)
}
