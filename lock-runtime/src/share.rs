//! Compute once, share the result ([`LockRequest::share`], the attribute's `share = "…"`):
//! one caller runs the body under the lock and stores its `Ok` value beside the lock for the
//! share's length; every caller that finds it there — at once, or when it gets the lock after
//! the one that computed it — returns it without running the body.
//!
//! The stored form is versioned: a marker byte, the format's version, the Rust type's name,
//! then the value in [postcard]'s compact encoding. A value of another type under the same
//! key is a [`LockError::Shared`] naming both types (never a misread), and a value in a format
//! version this build does not know is computed again and overwritten.
//!
//! [postcard]: https://docs.rs/postcard

use std::future::Future;
use std::time::Duration;

#[cfg(feature = "share")]
use serde::Serialize;
#[cfg(feature = "share")]
use serde::de::DeserializeOwned;

use crate::client::LockClient;
#[cfg(feature = "share")]
use crate::client::LockRequest;
use crate::error::LockError;
use crate::options::LockOptions;

/// The first byte of every stored result.
#[cfg(feature = "share")]
const MARKER: u8 = 0xD5;
/// The stored form's version: a build reads only this one (and computes again over others).
#[cfg(feature = "share")]
const VERSION: u8 = 1;

/// The longest `share` taken: a year (a longer one is almost always a unit mistake).
#[cfg(feature = "share")]
pub(crate) const MAX_SHARE: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);

/// The return type of a `#[distributed_lock(share = …)]` function: `Result<T, E>` with
/// `T: Serialize + DeserializeOwned` (the result is stored) and `E: From<LockError>`.
#[cfg_attr(
    feature = "share",
    diagnostic::on_unimplemented(
        message = "`share = …` needs a return type `Result<T, E>` whose `T` is `serde::Serialize + serde::de::DeserializeOwned` (and `E: From<distlock::LockError>`), not `{Self}`",
        label = "the `Ok` type of this result is stored for every caller: it must be `Serialize + DeserializeOwned`",
        note = "derive `serde::Serialize` and `serde::Deserialize` for the `Ok` type (or return a type that has them: `String`, numbers, `Vec<T>`, tuples)"
    )
)]
#[cfg_attr(
    not(feature = "share"),
    diagnostic::on_unimplemented(
        message = "`share = …` needs distlock's `share` feature",
        label = "shared results are stored through serde",
        note = "enable it: `distlock = {{ version = \"0.1\", features = [\"share\"] }}`"
    )
)]
pub trait SharedReturn: Sized {
    /// How a result of this type is stored and read back: the generated code asks for it
    /// first, as `<ReturnType as SharedReturn>::codec()`, so a type that cannot be stored is
    /// reported once, at the function's `-> ReturnType`, and nothing after it asks again.
    /// (Without the `share` feature no type implements this, and the bound's message says to
    /// enable it.)
    fn codec() -> Codec<Self>;
}

/// Encodes a result's `Ok` value; `None` for an `Err`, which is never stored.
#[cfg(feature = "share")]
type Encode<R> = fn(&R) -> Option<Result<Vec<u8>, postcard::Error>>;

/// How a shared call's result is stored (its `Ok` value encoded, an `Err` never) and read back:
/// made by [`SharedReturn::codec`], where the `Serialize + DeserializeOwned` bound is checked.
pub struct Codec<R> {
    #[cfg(feature = "share")]
    encode: Encode<R>,
    #[cfg(feature = "share")]
    decode: fn(&str, &[u8]) -> Result<Option<R>, LockError>,
    /// Without the `share` feature there is no codec: nothing can make one.
    #[cfg(not(feature = "share"))]
    never: std::convert::Infallible,
    #[cfg(not(feature = "share"))]
    returns: std::marker::PhantomData<R>,
}

#[cfg(feature = "share")]
impl<T, E> SharedReturn for Result<T, E>
where
    T: Serialize + DeserializeOwned,
    E: From<LockError>,
{
    fn codec() -> Codec<Self> {
        Codec {
            encode: |output| output.as_ref().ok().map(encode::<T>),
            decode: |key, bytes| Ok(decode::<T>(key, bytes)?.map(Ok)),
        }
    }
}

/// A [`LockRequest`] whose body's result is shared: made by [`LockRequest::share`], run by
/// [`run`](Self::run).
#[cfg(feature = "share")]
#[derive(Clone, Debug)]
#[must_use = "a shared request does nothing until `.run(..).await`"]
pub struct SharedRequest {
    request: LockRequest,
    share: Duration,
}

#[cfg(feature = "share")]
impl LockRequest {
    /// Shares the result of [`run`](SharedRequest::run)'s body with every caller for `share`:
    /// one caller computes it under the lock, the others return what it stored (see
    /// [`SharedRequest::run`]). Several keys (`lock_all`) store it under the first given.
    ///
    /// ```
    /// # use distlock_runtime as distlock;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock::LockError> {
    /// use std::time::Duration;
    /// use distlock::LockError;
    /// let client = distlock::LockClient::connect("memory://").await?;
    /// let report = || client.lock("report:2026-11").share(Duration::from_secs(60));
    /// let first: u64 = report().run(|| async { Ok::<_, LockError>(42) }).await?;
    /// // Within the minute, the stored result: the body does not run.
    /// let not_run = || async { Err(LockError::Config("computed twice".into())) };
    /// let again: u64 = report().run(not_run).await?;
    /// assert_eq!((first, again), (42, 42));
    /// # Ok(()) }
    /// ```
    pub fn share(self, share: Duration) -> SharedRequest {
        SharedRequest {
            request: self,
            share,
        }
    }
}

#[cfg(feature = "share")]
impl SharedRequest {
    /// Returns the result stored for the key if one is younger than the share, without
    /// taking the lock or running `body`. Otherwise takes the lock (waiting as the request
    /// says), looks again — a caller that held it before may have just stored one —, runs
    /// `body`, stores an `Ok` value for the share's length beside the lock, and releases.
    /// Callers that waited for the lock meanwhile then return the stored value: one run of
    /// `body` for any number of concurrent callers, in any number of processes.
    ///
    /// - An `Err` is never stored: the next caller runs `body` itself.
    /// - A value the store cannot keep (over its size limit, or the store unreachable after
    ///   the body ran) is still returned to this caller; a warning names the cause.
    /// - Errors: the acquisition's, a store that keeps no shared results or a request for a
    ///   read lock ([`LockError::Config`]), and a result stored under the key by another type
    ///   ([`LockError::Shared`]).
    pub async fn run<T, E, F, Fut>(self, body: F) -> Result<T, E>
    where
        T: Serialize + DeserializeOwned,
        E: From<LockError>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let SharedRequest { request, share } = self;
        let client = request.client().clone();
        let key = request.keys().next().unwrap_or_default().to_owned();
        if !request.is_write() {
            // Readers hold the key together: each would run the body.
            return Err(E::from(LockError::Config(format!(
                "`share` for key `{key}` needs the write lock (readers hold a key together, \
                 and each would run the body): drop `.read()` / `.upgradable()`"
            ))));
        }
        let place = Place::of(&client, &key, share, <Result<T, E>>::codec())?;
        if let Some(output) = place.look().await? {
            return output;
        }
        let guard = request.acquire().await?;
        let output = guard.scope(place.compute(body())).await;
        if let Err(error) = guard.release().await {
            tracing::warn!(%error, "distlock: the lock was not held to the end of the body");
        }
        output
    }
}

#[cfg(feature = "share")]
impl LockClient {
    /// Drops the result stored for `key` by a shared call ([`LockRequest::share`]): the next
    /// call runs its body. `Ok(true)` if one was stored.
    pub async fn forget_shared(&self, key: &str) -> Result<bool, LockError> {
        crate::key::validate_key(key)?;
        let backend = self.admin_backend();
        backend
            .capabilities()
            .require(crate::Feature::SharedResults, Some(key))?;
        backend
            .shared_drop(&self.name_of(key))
            .await
            .map_err(|source| failed(backend.store(), "forget the shared result of", key, source))
    }
}

/// What the attribute's `share = …` expands to: [`run_locked`](crate::locked::run_locked)
/// (or its several-keys form) around `body`, after a look for a stored result, which the
/// body's lock-holding part looks for again before it runs the body and stores its `Ok`.
/// `codec` is [`SharedReturn::codec`]'s, asked for first so that a type that cannot be stored
/// is one error, there.
#[cfg(feature = "share")]
pub async fn run_shared<T, E, F, B>(
    mut client: Option<LockClient>,
    options: LockOptions,
    keys: Vec<String>,
    share: Duration,
    body: F,
    busy: B,
    codec: Codec<Result<T, E>>,
) -> Result<T, E>
where
    E: From<LockError>,
    F: Future<Output = Result<T, E>>,
    B: FnOnce(LockError) -> Result<T, E>,
{
    if let Err(error) = crate::global::resolve(&mut client) {
        return Err(E::from(error));
    }
    let first = keys.first().cloned().unwrap_or_default();
    let place = Place::of(
        client.as_ref().expect("resolved above"),
        &first,
        share,
        codec,
    )?;
    if let Some(output) = place.look().await? {
        return output;
    }
    let body = place.compute(body);
    match <[String; 1]>::try_from(keys) {
        Ok([key]) => crate::locked::run_locked(client, options, key, body, busy).await,
        Err(keys) => crate::locked::run_locked_all(client, options, keys, body, busy).await,
    }
}

/// Without the `share` feature: never called, since no [`Codec`] can be made (the call's
/// `SharedReturn::codec()` is the one error, naming the feature).
#[cfg(not(feature = "share"))]
pub async fn run_shared<T, E, F, B>(
    client: Option<LockClient>,
    options: LockOptions,
    keys: Vec<String>,
    share: Duration,
    body: F,
    busy: B,
    codec: Codec<Result<T, E>>,
) -> Result<T, E>
where
    E: From<LockError>,
    F: Future<Output = Result<T, E>>,
    B: FnOnce(LockError) -> Result<T, E>,
{
    let _ = (client, options, keys, share, body, busy, codec.returns);
    match codec.never {}
}

/// Where a key's result is stored, and for how long.
#[cfg(feature = "share")]
struct Place<R> {
    client: LockClient,
    key: String,
    name: String,
    share: Duration,
    limit: usize,
    codec: Codec<R>,
}

#[cfg(feature = "share")]
impl<T, E: From<LockError>> Place<Result<T, E>> {
    /// Checks the key, the share and the store.
    fn of(
        client: &LockClient,
        key: &str,
        share: Duration,
        codec: Codec<Result<T, E>>,
    ) -> Result<Self, LockError> {
        crate::key::validate_key(key)?;
        check_share(share, key)?;
        let caps = client.admin_backend().capabilities();
        caps.require(crate::Feature::SharedResults, Some(key))?;
        let limit = caps.shares.unwrap_or_default();
        Ok(Place {
            client: client.clone(),
            key: key.to_owned(),
            name: client.name_of(key),
            share,
            limit,
            codec,
        })
    }

    /// The stored result, if one lives and is in this build's format.
    async fn look(&self) -> Result<Option<Result<T, E>>, LockError> {
        let backend = self.client.admin_backend();
        let stored = backend.shared_get(&self.name).await.map_err(|source| {
            failed(
                backend.store(),
                "read the shared result of",
                &self.key,
                source,
            )
        })?;
        match stored {
            Some(bytes) => (self.codec.decode)(&self.key, &bytes),
            None => Ok(None),
        }
    }

    /// Under the lock: looks again, else runs `body` and stores its `Ok` value.
    async fn compute<F>(&self, body: F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
    {
        if let Some(output) = self.look().await? {
            return output;
        }
        let output = body.await;
        if let Some(encoded) = (self.codec.encode)(&output) {
            self.keep(encoded).await;
        }
        output
    }

    /// Stores `value`; a failure is a warning (the caller has its value all the same).
    async fn keep(&self, encoded: Result<Vec<u8>, postcard::Error>) {
        let backend = self.client.admin_backend();
        let bytes = match encoded {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::warn!(key = %self.key, %error, "distlock: the result cannot be encoded, so it is not shared");
                return;
            }
        };
        if bytes.len() > self.limit {
            tracing::warn!(
                key = %self.key,
                "distlock: the result is {} bytes, over {}'s limit of {} bytes for a shared \
                 result: not shared (the caller still gets it)",
                bytes.len(),
                backend.store(),
                self.limit
            );
            return;
        }
        let entry = crate::backend::Stored {
            name: &self.name,
            value: &bytes,
            ttl: self.share,
        };
        if let Err(error) = backend.shared_put(entry).await {
            tracing::warn!(
                key = %self.key,
                %error,
                "distlock: the result could not be stored, so it is not shared (the caller \
                 still gets it)"
            );
        }
    }
}

/// A `share` outside 1 ms ..= [`MAX_SHARE`] is a [`LockError::Config`] naming the key.
#[cfg(feature = "share")]
fn check_share(share: std::time::Duration, key: &str) -> Result<(), LockError> {
    if share < std::time::Duration::from_millis(1) || share > MAX_SHARE {
        return Err(LockError::Config(format!(
            "`share` for key `{key}` is {share:?}: it must be between 1ms and 365 days \
             (how long every caller gets the stored result)"
        )));
    }
    Ok(())
}

#[cfg(feature = "share")]
fn failed(store: &'static str, op: &'static str, key: &str, source: crate::BoxError) -> LockError {
    LockError::Backend {
        backend: store,
        op,
        key: key.to_owned(),
        source,
    }
}

/// `value` in the stored form (see the module's docs).
#[cfg(feature = "share")]
fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, postcard::Error> {
    let name = std::any::type_name::<T>();
    let len = u16::try_from(name.len()).unwrap_or(u16::MAX);
    let mut bytes = Vec::with_capacity(4 + name.len() + 16);
    bytes.extend_from_slice(&[MARKER, VERSION]);
    bytes.extend_from_slice(&len.to_le_bytes());
    bytes.extend_from_slice(&name.as_bytes()[..usize::from(len)]);
    postcard::to_extend(value, bytes)
}

/// A stored result read back as `T`: `None` for a format this build does not know (computed
/// again and overwritten); [`LockError::Shared`] for another type's value.
#[cfg(feature = "share")]
fn decode<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<Option<T>, LockError> {
    let shared = |reason: String| LockError::Shared {
        key: key.to_owned(),
        reason,
    };
    let (head, rest) = bytes.split_at(bytes.len().min(4));
    let [MARKER, version, a, b] = *head else {
        return Err(shared(format!(
            "the {} bytes stored there are not a result distlock stored (someone else writes \
             that key?); `forget` it to compute the result again",
            bytes.len()
        )));
    };
    if version != VERSION {
        tracing::warn!(
            key,
            version,
            "distlock: a shared result in a format this build does not read (version {version}, \
             this build reads {VERSION}): computed again"
        );
        return Ok(None);
    }
    let len = usize::from(u16::from_le_bytes([a, b]));
    let Some((name, value)) = (rest.len() >= len).then(|| rest.split_at(len)) else {
        return Err(shared("the stored result is cut short".into()));
    };
    let name = String::from_utf8_lossy(name);
    let wanted = std::any::type_name::<T>();
    if name != wanted {
        return Err(shared(format!(
            "it was stored by a function returning `{name}`, and this one returns `{wanted}`; \
             give each function keys of its own (or `forget` the key)"
        )));
    }
    postcard::from_bytes(value).map(Some).map_err(|error| {
        shared(format!(
            "the stored `{name}` cannot be read ({error}): was the type changed since it was \
             stored? `forget` the key, or put a version in the key"
        ))
    })
}

#[cfg(all(test, feature = "share"))]
mod tests {
    use super::*;

    #[test]
    fn a_value_comes_back_as_it_went_in() {
        let bytes = encode(&(7u64, "seven".to_owned())).unwrap();
        assert_eq!(&bytes[..2], &[MARKER, VERSION]);
        let back: Option<(u64, String)> = decode("k", &bytes).unwrap();
        assert_eq!(back, Some((7, "seven".to_owned())));
    }

    #[test]
    fn another_type_is_named_not_misread() {
        let bytes = encode(&7u64).unwrap();
        let error = decode::<i64>("k", &bytes).unwrap_err();
        let text = error.to_string();
        assert!(text.contains("`u64`") && text.contains("`i64`"), "{text}");
        assert_eq!(error.key(), Some("k"));
    }

    #[test]
    fn another_version_is_computed_again_and_foreign_bytes_are_an_error() {
        let mut bytes = encode(&7u64).unwrap();
        bytes[1] = VERSION + 1;
        assert_eq!(decode::<u64>("k", &bytes).unwrap(), None);
        let error = decode::<u64>("k", b"plain text").unwrap_err();
        assert!(
            error.to_string().contains("not a result distlock stored"),
            "{error}"
        );
        let error = decode::<u64>("k", &[]).unwrap_err();
        assert!(error.to_string().contains("not a result"), "{error}");
    }

    #[test]
    fn a_cut_value_is_an_error() {
        let bytes = encode(&"a long enough string".to_owned()).unwrap();
        let error = decode::<String>("k", &bytes[..bytes.len() - 3]).unwrap_err();
        assert!(error.to_string().contains("cannot be read"), "{error}");
        let error = decode::<String>("k", &bytes[..6]).unwrap_err();
        assert!(error.to_string().contains("cut short"), "{error}");
    }

    #[test]
    fn shares_out_of_range_are_refused_naming_the_key() {
        assert!(check_share(Duration::from_millis(1), "k").is_ok());
        assert!(check_share(MAX_SHARE, "k").is_ok());
        for bad in [Duration::ZERO, MAX_SHARE + Duration::from_secs(1)] {
            let error = check_share(bad, "report:1").unwrap_err();
            assert!(error.to_string().contains("report:1"), "{error}");
        }
    }
}
