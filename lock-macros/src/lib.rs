//! `#[distributed_lock]`: run an `async fn` only while this process holds a distributed lock.
//!
//! Use it through the `distlock` crate, which documents the attribute. This crate never depends
//! on the runtime: the code it generates names `::distlock::__private::…` (or the path given
//! with `crate = "…"`).
//!
//! Passes, one module each: `attr` parses the arguments, `key` parses the key template,
//! `valid` checks both against the function, `expand` generates the code. Errors are
//! collected, not returned at the first one, and emitted next to the unchanged function, so the
//! user sees every mistake at once and no follow-on errors.

mod attr;
mod duration;
mod errors;
mod expand;
mod key;
mod valid;

use proc_macro::TokenStream;

/// Runs an `async fn` only while this process holds the distributed lock named by `key`.
///
/// ```ignore
/// #[distributed_lock(key = "order:<id>", lease = "10s", wait = "2s")]
/// async fn next_order_id(id: u64) -> Result<u64, LockError> { Ok(id + 1) }
/// ```
///
/// Arguments: `key` (required template: `<param>`, `<param.field>`, `<self.field>`, `<<`/`>>`
/// for literal brackets), `lease`, `wait` (`"0s"` tries once, `"forever"`), `renew`,
/// `on_lost` (`"abort"` or `"continue"`), `fencing`, `fair`, `mode` (`"read"` or `"write"`),
/// `permits` (a permit of a semaphore of that many, e.g. `permits = 4`, or a `u16` constant:
/// `permits = GPUS`), `min_hold` (held at
/// least this long after the grant, however early the body returns; at most `lease`),
/// `max_hold` (renewal stops this long after the grant and the lock is lost then; at least
/// `lease`), `lock_delay` (after an involuntary loss the key stays taken this much longer),
/// `on_busy` (`"skip"`: a lock still busy as `wait` ends returns `Ok(Default::default())`
/// without running the body; `"error"`, the default), `share` (compute once, share the result:
/// one caller runs the body and every caller within the duration gets its `Ok` value; feature
/// `share`), `client` (an expression giving the function's `LockClient`, evaluated at each
/// call), `crate`.
/// The function must return
/// `Result<T, E>` with `E: From<distlock::LockError>`. The `distlock` crate documents each
/// argument, its default, and the guarantees on every exit path.
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::distributed_lock(args.into(), item.into()).into()
}
