//! Round trips of `#[distributed_lock]` calls, counted by a `redis-server` that serves this one
//! test only (so nothing else adds commands): a call on a free lock is one `SET` and one
//! `EVALSHA`; a nested same-key call adds nothing.

use distlock::{LockClient, LockError, distributed_lock};
use support::RedisServer;

#[distributed_lock(key = "account:<id>")]
async fn outer(id: u64, nested: bool) -> Result<(), LockError> {
    if nested {
        inner(id).await?;
        inner(id).await?;
    }
    Ok(())
}

#[distributed_lock(key = "account:<id>")]
async fn inner(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[tokio::test]
async fn a_call_is_two_round_trips_and_a_nested_call_adds_none() {
    let server = RedisServer::start();
    distlock::init(LockClient::connect(&server.url()).await.unwrap()).unwrap();
    let total = || async {
        (
            server.command_calls("set").await,
            server.command_calls("evalsha").await,
        )
    };

    server.reset_stats().await;
    outer(1, false).await.unwrap();
    let plain = total().await;
    server.reset_stats().await;
    outer(1, true).await.unwrap();
    let nested = total().await;
    println!(
        "annotated call: (SET, EVALSHA) = {plain:?}; with two nested same-key calls: {nested:?}"
    );
    assert_eq!(
        plain,
        (1, 1),
        "one SET NX PX to take it, one EVALSHA to give it back"
    );
    assert_eq!(
        nested, plain,
        "nested same-key calls must not talk to the server"
    );
    assert_eq!(server.get("lock:account:1").await, None);
}
