//! Behaviour of `#[distributed_lock]` functions, written once and run by `attribute_memory.rs`
//! and `attribute_redis.rs` against their backend. Each binary provides `crate::backend` with
//! `setup()` (installs the global client once), `holder(name)` (what the server holds) and
//! `steal(name)` (another owner takes the key behind the holder's back) and `queued(name)` (how
//! many waiters stand in the key's fair queue).
//!
//! All tests of a binary share one global client, each on its own `#[tokio::test]` runtime,
//! in any order — what users' test suites do.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use distlock::{LockError, distributed_lock};

use crate::backend;
use support::{eventually, unique};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

async fn gone(name: &str) -> bool {
    eventually(ms(1_000), || async {
        backend::holder(name).await.is_none()
    })
    .await
}

#[derive(Debug)]
#[allow(dead_code)] // `Lock` carries the error for callers; these tests only match on `Invalid`
enum AppError {
    Lock(LockError),
    Invalid(&'static str),
}

impl From<LockError> for AppError {
    fn from(error: LockError) -> Self {
        AppError::Lock(error)
    }
}

#[distributed_lock(key = "plain:<tag>", lease = "10s")]
async fn plain(tag: &str, value: u64) -> Result<u64, LockError> {
    assert!(
        backend::holder(&format!("lock:plain:{tag}"))
            .await
            .is_some(),
        "held in the body"
    );
    Ok(value * 2)
}

#[tokio::test]
async fn a_normal_return_releases_before_returning() {
    backend::setup().await;
    let tag = unique("normal");
    assert_eq!(plain(&tag, 21).await.unwrap(), 42);
    // Awaited, not spawned: gone the moment the call returns.
    assert_eq!(backend::holder(&format!("lock:plain:{tag}")).await, None);
}

#[distributed_lock(key = "early:<tag>")]
async fn early(tag: String, bail: bool) -> Result<&'static str, AppError> {
    if bail {
        return Ok("early");
    }
    let _ = &tag;
    Err(AppError::Invalid("late"))?;
    Ok("unreachable")
}

#[tokio::test]
async fn early_return_and_question_mark_release() {
    backend::setup().await;
    let tag = unique("early");
    assert_eq!(early(tag.clone(), true).await.unwrap(), "early");
    assert_eq!(backend::holder(&format!("lock:early:{tag}")).await, None);
    assert!(matches!(
        early(tag.clone(), false).await,
        Err(AppError::Invalid("late"))
    ));
    assert_eq!(backend::holder(&format!("lock:early:{tag}")).await, None);
}

#[distributed_lock(key = "panics:<tag>", lease = "30s")]
async fn panics(tag: String) -> Result<(), LockError> {
    let _ = tag;
    panic!("the body panics");
}

#[tokio::test]
async fn a_panic_releases() {
    backend::setup().await;
    let tag = unique("panic");
    let result = tokio::spawn(panics(tag.clone())).await;
    assert!(result.is_err(), "the panic propagates");
    assert!(
        gone(&format!("lock:panics:{tag}")).await,
        "released after the panic"
    );
}

#[distributed_lock(key = "slow:<tag>", lease = "30s")]
async fn slow(tag: &str, done: &AtomicBool) -> Result<(), LockError> {
    let _ = tag;
    tokio::time::sleep(Duration::from_secs(60)).await;
    done.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn a_caller_timeout_cancels_and_releases() {
    backend::setup().await;
    let tag = unique("timeout");
    let done = AtomicBool::new(false);
    let started = Instant::now();
    assert!(
        tokio::time::timeout(ms(200), slow(&tag, &done))
            .await
            .is_err()
    );
    assert!(started.elapsed() < ms(1_000));
    assert!(
        gone(&format!("lock:slow:{tag}")).await,
        "released after cancellation"
    );
    assert!(!done.load(Ordering::SeqCst));
}

#[tokio::test]
async fn a_runtime_shutdown_releases() {
    backend::setup().await;
    let tag = unique("shutdown");
    let name = format!("lock:slow:{tag}");
    let for_thread = tag.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.spawn(async move {
            static NEVER: AtomicBool = AtomicBool::new(false);
            let _ = slow(&for_thread, &NEVER).await;
        });
        std::thread::sleep(ms(300));
        drop(runtime); // shuts down with the body still running
    })
    .join()
    .unwrap();
    assert!(
        gone(&name).await,
        "released after the runtime shut down, not after 30 s"
    );
}

#[distributed_lock(key = "long:<tag>", lease = "300ms")]
async fn long_body(tag: &str) -> Result<u32, LockError> {
    let name = format!("lock:long:{tag}");
    let held = backend::holder(&name).await;
    let mut checks = 0;
    let started = Instant::now();
    while started.elapsed() < ms(1_300) {
        assert_eq!(backend::holder(&name).await, held, "the key stays ours");
        assert!(!distlock::current().unwrap().is_lost());
        checks += 1;
        tokio::time::sleep(ms(50)).await;
    }
    Ok(checks)
}

#[tokio::test]
async fn renewal_keeps_the_lock_through_a_body_four_leases_long() {
    backend::setup().await;
    let tag = unique("long");
    let checks = long_body(&tag).await.expect("still held at the end");
    assert!(checks >= 10);
    assert_eq!(backend::holder(&format!("lock:long:{tag}")).await, None);
}

#[distributed_lock(key = "abort:<tag>", lease = "300ms")]
async fn abortable(
    tag: &str,
    started: &AtomicBool,
    finished: &AtomicBool,
) -> Result<(), LockError> {
    let _ = tag;
    started.store(true, Ordering::SeqCst);
    tokio::time::sleep(ms(800)).await;
    finished.store(true, Ordering::SeqCst); // the side effect scheduled after the loss
    Ok(())
}

#[tokio::test]
async fn on_lost_abort_stops_the_body_and_returns_lost() {
    backend::setup().await;
    let tag = unique("abort");
    let name = format!("lock:abort:{tag}");
    let (started, finished) = (AtomicBool::new(false), AtomicBool::new(false));
    let call = abortable(&tag, &started, &finished);
    let thief = async {
        tokio::time::sleep(ms(100)).await;
        backend::steal(&name).await;
        Instant::now()
    };
    let (result, stolen_at) = tokio::join!(call, thief);
    let stopped_after = stolen_at.elapsed();
    assert!(started.load(Ordering::SeqCst));
    assert!(
        matches!(&result, Err(LockError::Lost { key }) if key == &format!("abort:{tag}")),
        "{result:?}"
    );
    assert!(
        stopped_after < ms(200),
        "stopped {stopped_after:?} after the loss"
    );
    tokio::time::sleep(ms(900)).await;
    assert!(
        !finished.load(Ordering::SeqCst),
        "the body ran on after the loss"
    );
    assert_eq!(
        backend::holder(&name).await.as_deref(),
        Some("thief"),
        "the thief's lock is intact"
    );
}

#[distributed_lock(key = "continue:<tag>", lease = "300ms", on_lost = "continue")]
async fn continuing(tag: &str) -> Result<bool, LockError> {
    let _ = tag;
    tokio::time::sleep(ms(500)).await;
    Ok(distlock::current()
        .expect("inside a locked function")
        .is_lost())
}

#[tokio::test]
async fn on_lost_continue_finishes_and_current_says_lost() {
    backend::setup().await;
    let tag = unique("continue");
    let name = format!("lock:continue:{tag}");
    let thief = async {
        tokio::time::sleep(ms(100)).await;
        backend::steal(&name).await;
    };
    let (result, ()) = tokio::join!(continuing(&tag), thief);
    assert!(result.unwrap(), "finished, and knew it had lost the lock");
    assert_eq!(backend::holder(&name).await.as_deref(), Some("thief"));
}

/// Returns how long the store keeps its own lock, from inside the body.
#[distributed_lock(key = "delayed:<tag>", lease = "2s", lock_delay = "3s")]
async fn delayed(tag: &str) -> Result<Option<Duration>, LockError> {
    Ok(backend::ttl(&format!("lock:delayed:{tag}")).await)
}

/// `lock_delay` reaches the store: the lock is kept for its lease plus the delay (a holder
/// that died would leave it that long), and the body's return frees it at once.
#[tokio::test]
async fn lock_delay_lengthens_the_stores_expiry_not_the_hold() {
    backend::setup().await;
    let tag = unique("delayed");
    let ttl = delayed(&tag)
        .await
        .unwrap()
        .expect("held while the body ran");
    assert!(
        ttl > ms(4_000) && ttl <= ms(5_000),
        "kept {ttl:?} by the store (lease 2s + lock_delay 3s)"
    );
    assert!(gone(&format!("lock:delayed:{tag}")).await);
}

/// A body that hangs: renewed past its lease, stopped at `max_hold`. (A 2 s lease, renewed
/// every 667 ms: a busy machine's stall does not lose it before `max_hold`, as a 200 ms lease
/// was once lost at 400 ms.)
#[distributed_lock(key = "capped:<tag>", lease = "2s", max_hold = "3s")]
async fn hangs(tag: &str, finished: &AtomicBool) -> Result<(), LockError> {
    let _ = tag;
    tokio::time::sleep(ms(10_000)).await;
    finished.store(true, Ordering::SeqCst);
    Ok(())
}

/// `max_hold`: a body that outlives it is stopped then (not at its first lease: renewal ran
/// until `max_hold`), the call returns `Lost`, and the lock is given back.
#[tokio::test]
async fn max_hold_stops_a_hung_body_and_gives_the_lock_back() {
    backend::setup().await;
    let tag = unique("capped");
    let name = format!("lock:capped:{tag}");
    let finished = AtomicBool::new(false);
    let started = Instant::now();
    let result = hangs(&tag, &finished).await;
    let stopped_after = started.elapsed();
    assert!(
        matches!(&result, Err(LockError::Lost { key }) if key == &format!("capped:{tag}")),
        "{result:?}"
    );
    // Not at its first lease (renewal ran until `max_hold`), and by the lease after it.
    assert!(
        stopped_after >= ms(3_000) && stopped_after < ms(5_000),
        "stopped {stopped_after:?} after the call began (lease 2s, max_hold 3s)"
    );
    assert!(!finished.load(Ordering::SeqCst));
    assert!(gone(&name).await, "the capped lock was not given back");
}

#[distributed_lock(key = "account:<id>", fencing = true)]
async fn outer(id: u64) -> Result<(Option<u64>, Option<u64>), LockError> {
    let mine = distlock::current().unwrap().fencing_token();
    // `inner` has `wait = "0s"`: had it gone to the server, the lock we hold would make it fail.
    let (nested, key) = inner(id).await?;
    assert_eq!(key, format!("account:{id}"));
    Ok((mine, nested))
}

#[distributed_lock(key = "account:<id>", wait = "0s")]
async fn inner(id: u64) -> Result<(Option<u64>, String), LockError> {
    let _ = id;
    let current = distlock::current().unwrap();
    Ok((current.fencing_token(), current.key().to_owned()))
}

#[tokio::test]
async fn a_nested_same_key_call_is_reentrant_and_sees_the_fencing_token() {
    backend::setup().await;
    let id = fastrand::u64(1_000_000..u64::MAX);
    let (mine, nested) = tokio::time::timeout(Duration::from_secs(5), outer(id))
        .await
        .expect("no deadlock")
        .unwrap();
    assert!(mine.is_some());
    assert_eq!(
        nested, mine,
        "the nested call sees the outer lock and its token"
    );
    assert_eq!(backend::holder(&format!("lock:account:{id}")).await, None);
    assert!(distlock::current().is_none(), "nothing held outside");
}

#[tokio::test]
async fn fencing_tokens_increase_across_calls() {
    backend::setup().await;
    let id = fastrand::u64(1_000_000..u64::MAX);
    let mut last = 0;
    for _ in 0..4 {
        let (token, _) = outer(id).await.unwrap();
        let token = token.unwrap();
        assert!(token > last, "{token} after {last}");
        last = token;
    }
}

#[distributed_lock(key = "busy:<tag>", lease = "10s")]
async fn hold_for(tag: &str, hold: Duration) -> Result<(), LockError> {
    let _ = tag;
    tokio::time::sleep(hold).await;
    Ok(())
}

#[distributed_lock(key = "busy:<tag>", wait = "0s")]
async fn try_now(tag: &str) -> Result<(), LockError> {
    let _ = tag;
    Ok(())
}

#[tokio::test]
async fn two_tasks_are_two_owners_and_wait_zero_fails_fast() {
    backend::setup().await;
    let tag = Arc::new(unique("busy"));
    let holder_tag = Arc::clone(&tag);
    let holder = tokio::spawn(async move { hold_for(&holder_tag, ms(500)).await });
    tokio::time::sleep(ms(100)).await;
    let started = Instant::now();
    let result = tokio::spawn({
        let tag = Arc::clone(&tag);
        async move { try_now(&tag).await }
    })
    .await
    .unwrap();
    assert!(matches!(result, Err(LockError::Busy { .. })), "{result:?}");
    assert!(started.elapsed() < ms(200), "{:?}", started.elapsed());
    holder.await.unwrap().unwrap();
    try_now(&tag).await.expect("free again");
}

struct Shard {
    region: String,
    counter: AtomicU64,
}

struct Order {
    id: u64,
    customer: Customer,
}

struct Customer {
    name: String,
}

impl Shard {
    #[distributed_lock(key = "shard:<self.region>:<order.customer.name>:<order.id>")]
    async fn place(&self, order: &Order) -> Result<String, LockError> {
        self.counter.fetch_add(1, Ordering::SeqCst);
        Ok(distlock::current().unwrap().key().to_owned())
    }
}

#[tokio::test]
async fn methods_and_field_paths_build_the_key() {
    backend::setup().await;
    let region = unique("eu");
    let shard = Shard {
        region: region.clone(),
        counter: AtomicU64::new(0),
    };
    let order = Order {
        id: 7,
        customer: Customer { name: "ada".into() },
    };
    let key = shard.place(&order).await.unwrap();
    assert_eq!(key, format!("shard:{region}:ada:7"));
    assert_eq!(shard.counter.load(Ordering::SeqCst), 1);
    assert!(distlock::current().is_none());
}

#[distributed_lock(key = "fair:<tag>", lease = "10s", wait = "20s", fair = true)]
async fn fair_turn(
    tag: &str,
    arrival: usize,
    order: &std::sync::Mutex<Vec<usize>>,
) -> Result<(), LockError> {
    order.lock().unwrap().push(arrival);
    tokio::time::sleep(ms(2)).await;
    Ok(())
}

/// `fair = true`: calls queue on the server and run in the order they arrived, although all
/// come from one client (a plain lock would let them in through the client's local queue and
/// hand-overs, in any order relative to a queue on the server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_calls_run_in_arrival_order() {
    backend::setup().await;
    let tag = unique("fair");
    let name = format!("lock:fair:{tag}");
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let first = distlock::client()
        .unwrap()
        .lock(format!("fair:{tag}"))
        .fair()
        .acquire()
        .await
        .unwrap();
    let mut calls = Vec::new();
    for arrival in 0..5 {
        let (tag, order) = (tag.clone(), order.clone());
        calls.push(tokio::spawn(async move {
            fair_turn(&tag, arrival, &order).await
        }));
        assert!(
            eventually(ms(5_000), || async {
                backend::queued(&name).await > arrival
            })
            .await,
            "call {arrival} never queued"
        );
    }
    first.release().await.unwrap();
    for call in calls {
        call.await.unwrap().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    assert!(gone(&name).await);
    assert_eq!(backend::queued(&name).await, 0, "nobody left in line");
}

#[distributed_lock(key = "page:<tag>", mode = "read", wait = "0s")]
async fn read_page(tag: &str) -> Result<distlock::LockMode, LockError> {
    let _ = tag;
    Ok(distlock::current().unwrap().mode())
}

#[distributed_lock(key = "page:<tag>", mode = "read", wait = "0s")]
async fn read_then(tag: &str, write: bool) -> Result<distlock::LockMode, LockError> {
    if write {
        write_page(tag).await
    } else {
        read_page(tag).await
    }
}

#[distributed_lock(key = "page:<tag>", mode = "write", wait = "0s")]
async fn write_page(tag: &str) -> Result<distlock::LockMode, LockError> {
    // A read of the same key under this write is granted locally (`wait = "0s"`: had it gone
    // to the server, the write lock would make it fail).
    let inner = read_page(tag).await?;
    assert_eq!(
        inner,
        distlock::LockMode::Write,
        "the read runs under the write"
    );
    Ok(distlock::current().unwrap().mode())
}

/// In one task, a read under a write and a read under a read are granted locally; a write under
/// a read fails at once with `WriteUnderRead` naming the key, and the read lock is still released.
#[tokio::test]
async fn reads_nest_under_writes_and_reads_but_a_write_under_a_read_fails_at_once() {
    backend::setup().await;
    let tag = unique("rw");
    let name = format!("lock:page:{tag}");
    assert_eq!(write_page(&tag).await.unwrap(), distlock::LockMode::Write);
    assert!(gone(&name).await);
    assert_eq!(
        read_then(&tag, false).await.unwrap(),
        distlock::LockMode::Read
    );
    let started = Instant::now();
    let error = tokio::time::timeout(Duration::from_secs(5), read_then(&tag, true))
        .await
        .expect("fails at once, not after a wait")
        .unwrap_err();
    assert!(started.elapsed() < ms(2_000));
    match &error {
        LockError::WriteUnderRead { key } => assert_eq!(key, &format!("page:{tag}")),
        other => panic!("expected WriteUnderRead, got {other}"),
    }
    assert!(error.to_string().contains("read lock"), "{error}");
    // The outer read was released: a writer gets the key at once.
    let client = distlock::client().unwrap();
    let writer = client.lock(format!("page:{tag}")).wait(ms(0)).acquire();
    writer
        .await
        .expect("the read lock was released")
        .release()
        .await
        .unwrap();
}

/// The semaphore's size, given to the attribute as a constant.
const GPUS: u16 = 2;

#[distributed_lock(key = "gpu:<tag>", permits = GPUS, wait = "30s")]
async fn use_gpu(
    tag: &str,
    inside: &AtomicU64,
    most: &AtomicU64,
) -> Result<Option<u16>, LockError> {
    let _ = tag;
    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
    most.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(ms(50)).await;
    inside.fetch_sub(1, Ordering::SeqCst);
    Ok(distlock::current().unwrap().permits())
}

/// What a call holding the one permit of `gpu:<tag>` does inside.
#[derive(Clone, Copy)]
enum Inside {
    Nothing,
    SamePermit,
    OtherLimit,
    Lock,
}

#[distributed_lock(key = "gpu:<tag>", permits = 1, wait = "0s")]
async fn one_gpu(tag: &str, inside: Inside) -> Result<Option<u16>, LockError> {
    match inside {
        Inside::Nothing => Ok(distlock::current().unwrap().permits()),
        // `wait = "0s"` and one permit: granted only locally.
        Inside::SamePermit => Box::pin(one_gpu(tag, Inside::Nothing)).await,
        Inside::OtherLimit => two_gpus(tag).await,
        Inside::Lock => lock_gpu(tag).await,
    }
}

#[distributed_lock(key = "gpu:<tag>", permits = 2, wait = "0s")]
async fn two_gpus(tag: &str) -> Result<Option<u16>, LockError> {
    let _ = tag;
    Ok(None)
}

#[distributed_lock(key = "gpu:<tag>", wait = "0s")]
async fn lock_gpu(tag: &str) -> Result<Option<u16>, LockError> {
    let _ = tag;
    Ok(None)
}

/// `permits = GPUS` (a constant of 2): never more than two calls inside at once, and two
/// reached; each knows its semaphore's limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_permits_calls_run_at_once() {
    backend::setup().await;
    let tag = unique("gpu");
    let (inside, most) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut calls = Vec::new();
    for _ in 0..6 {
        let (tag, inside, most) = (tag.clone(), inside.clone(), most.clone());
        calls.push(tokio::spawn(
            async move { use_gpu(&tag, &inside, &most).await },
        ));
    }
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), Some(2));
    }
    assert_eq!(most.load(Ordering::SeqCst), 2, "two permits, both used");
    assert!(gone(&format!("lock:gpu:{tag}")).await);
}

/// In one task, a permit under a permit of the same semaphore is granted locally; the same
/// name under another limit, or as a lock, fails at once with `Config` — and the outer permit
/// is still released.
#[tokio::test]
async fn a_nested_permit_is_granted_locally_and_another_kind_is_refused() {
    backend::setup().await;
    let tag = unique("gpu");
    assert_eq!(one_gpu(&tag, Inside::SamePermit).await.unwrap(), Some(1));
    for (inside, words) in [
        (Inside::OtherLimit, ["1 permits", "asks for 2"]),
        (Inside::Lock, ["semaphore of 1 permits", "asks for a lock"]),
    ] {
        match one_gpu(&tag, inside).await {
            Err(LockError::Config(message)) => {
                for word in words {
                    assert!(message.contains(word), "{word:?} not in {message}");
                }
                assert!(message.contains(&format!("`gpu:{tag}`")), "{message}");
            }
            other => panic!("expected a Config error, got {other:?}"),
        }
    }
    // Every outer permit was released: the one permit is free.
    assert_eq!(one_gpu(&tag, Inside::Nothing).await.unwrap(), Some(1));
}

// ---- Several keys: `key = ["…", "…"]` ----

#[distributed_lock(key = ["pair:<tag>:<from>", "pair:<tag>:<to>"], wait = "30s", lease = "10s")]
async fn move_between(tag: &str, from: u32, to: u32) -> Result<String, LockError> {
    for n in [from, to] {
        assert!(
            backend::holder(&format!("lock:pair:{tag}:{n}"))
                .await
                .is_some(),
            "account {n} held in the body"
        );
    }
    tokio::task::yield_now().await;
    Ok(distlock::current().unwrap().key().to_owned())
}

/// Both directions at once, 20 calls each: no deadlock, the first key in canonical order is
/// `current()`, and every key is gone after the calls return.
#[tokio::test]
async fn a_key_list_takes_every_key_in_one_order_and_releases_them_all() {
    backend::setup().await;
    let tag = unique("pair");
    let mut calls = Vec::new();
    for n in 0..40 {
        let tag = tag.clone();
        calls.push(tokio::spawn(async move {
            let (from, to) = if n % 2 == 0 { (1, 2) } else { (2, 1) };
            move_between(&tag, from, to).await
        }));
    }
    for call in calls {
        let current = tokio::time::timeout(Duration::from_secs(20), call)
            .await
            .expect("no deadlock")
            .unwrap()
            .unwrap();
        assert_eq!(current, format!("pair:{tag}:1"));
    }
    assert!(gone(&format!("lock:pair:{tag}:1")).await);
    assert!(gone(&format!("lock:pair:{tag}:2")).await);
    // The same account twice: one key.
    assert_eq!(
        move_between(&tag, 3, 3).await.unwrap(),
        format!("pair:{tag}:3")
    );
}

#[distributed_lock(key = "pair:<tag>:<held>", wait = "0s")]
async fn holding_one(tag: &str, held: u32, then: u32) -> Result<String, LockError> {
    // This task holds `held`; the list asks for `held` and `then`: `held` is granted
    // reentrantly, only `then` is acquired (`wait = "30s"` in `move_between`).
    move_between(tag, then, held).await
}

/// A task that holds one key of a list is granted that key reentrantly and acquires only the
/// rest; everything is released when the calls return.
#[tokio::test]
async fn a_key_list_under_one_of_its_keys_is_granted_that_key_reentrantly() {
    backend::setup().await;
    let tag = unique("pair");
    let current = tokio::time::timeout(Duration::from_secs(5), holding_one(&tag, 2, 1))
        .await
        .expect("no self-deadlock")
        .unwrap();
    // `current()` in the inner body: the key it acquired (the other is the outer call's).
    assert_eq!(current, format!("pair:{tag}:1"));
    assert!(gone(&format!("lock:pair:{tag}:1")).await);
    assert!(gone(&format!("lock:pair:{tag}:2")).await);
}

#[distributed_lock(key = ["pair:<tag>:1", "pair:<tag>:2"], wait = "0s", lease = "3s", on_lost = "abort")]
async fn stolen_pair(tag: &str) -> Result<(), LockError> {
    backend::steal(&format!("lock:pair:{tag}:2")).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    Ok(())
}

/// Another owner takes one key of the list behind the body's back: the body is stopped with
/// `Lost` at the next renewal (lease 3 s: within a second), the key still ours is given back,
/// the thief's (10 s) is left alone.
#[tokio::test]
async fn losing_one_key_of_a_list_aborts_the_body() {
    backend::setup().await;
    let tag = unique("pair");
    let result = tokio::time::timeout(Duration::from_secs(30), stolen_pair(&tag))
        .await
        .expect("the body was not stopped");
    assert!(matches!(result, Err(LockError::Lost { .. })), "{result:?}");
    assert!(gone(&format!("lock:pair:{tag}:1")).await);
    assert_eq!(
        backend::holder(&format!("lock:pair:{tag}:2"))
            .await
            .as_deref(),
        Some("thief")
    );
}

#[distributed_lock(key = "tick:<tag>", lease = "5s", min_hold = "1500ms", wait = "0s")]
async fn tick(tag: &str) -> Result<(), LockError> {
    Ok(())
}

/// `min_hold`: the body returns at once, the lock stays on the server; another call in that
/// time is busy (`wait = "0s"`: `Busy`); once `min_hold` has passed a call runs again.
#[tokio::test]
async fn min_hold_keeps_the_lock_after_a_quick_body() {
    backend::setup().await;
    let tag = unique("tick");
    let started = Instant::now();
    tick(&tag).await.unwrap();
    assert!(
        backend::holder(&format!("lock:tick:{tag}")).await.is_some(),
        "returned before min_hold: the lock stays"
    );
    assert!(matches!(tick(&tag).await, Err(LockError::Busy { .. })));
    loop {
        match tick(&tag).await {
            Ok(()) => break,
            Err(LockError::Busy { .. }) => {
                assert!(started.elapsed() < ms(3_000), "never free again");
                tokio::time::sleep(ms(50)).await;
            }
            Err(error) => panic!("{error}"),
        }
    }
    let after = started.elapsed();
    assert!(
        after >= ms(1_000),
        "ran again {after:?} after the first call"
    );
}

#[distributed_lock(key = "tick:<tag>", lease = "5s")]
async fn outer_tick(tag: &str) -> Result<(), LockError> {
    tick(tag).await
}

/// A reentrant call runs under the outer call's hold: its own `min_hold` is not applied, and
/// the lock goes when the outer call returns.
#[tokio::test]
async fn a_reentrant_calls_min_hold_is_the_outer_calls() {
    backend::setup().await;
    let tag = unique("tick");
    outer_tick(&tag).await.unwrap();
    assert!(gone(&format!("lock:tick:{tag}")).await);
}

#[distributed_lock(key = "tick:<tag>", min_hold = "40s", wait = "0s")]
async fn longer_than_the_default_lease(tag: &str) -> Result<(), LockError> {
    let _ = tag;
    Ok(())
}

/// Without `lease` the client's default (30 s) applies: a longer `min_hold` is refused at run
/// time with `Config`, naming the key and both durations, and nothing is taken.
#[tokio::test]
async fn a_min_hold_longer_than_the_clients_default_lease_is_refused() {
    backend::setup().await;
    let tag = unique("tick");
    match longer_than_the_default_lease(&tag).await {
        Err(LockError::Config(message)) => assert!(
            message.contains(&format!("`tick:{tag}`")) && message.contains("40s"),
            "{message}"
        ),
        other => panic!("min_hold over the default lease: {other:?}"),
    }
    assert!(backend::holder(&format!("lock:tick:{tag}")).await.is_none());
}
