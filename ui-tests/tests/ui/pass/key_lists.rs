use distlock::{LockClient, LockError, distributed_lock};

/// Two accounts, named in argument order: taken in canonical order.
#[distributed_lock(key = ["account:<from>", "account:<to>"], wait = "2s")]
async fn transfer(from: u32, to: u32, amount: u64) -> Result<Vec<String>, LockError> {
    let _ = amount;
    let here = distlock::current().expect("inside the locked body");
    Ok(vec![here.key().to_owned()])
}

/// A list of one template is a set of one key; the arguments may be moved by the body.
#[distributed_lock(key = ["user:<user.id>"], mode = "read", fencing = true)]
async fn one_in_a_list(user: User) -> Result<User, LockError> {
    Ok(user)
}

struct User {
    id: u64,
}

fn assert_send<T: Send>(_: &T) {}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    distlock::init(LockClient::connect("memory://").await.unwrap()).unwrap();
    let call = transfer(9, 2, 100);
    assert_send(&call);
    // `current()` is the first key in canonical order, whatever the argument order.
    assert_eq!(call.await.unwrap(), ["account:2"]);
    assert_eq!(transfer(2, 9, 1).await.unwrap(), ["account:2"]);
    // The same account twice: one lock.
    assert_eq!(transfer(5, 5, 1).await.unwrap(), ["account:5"]);
    assert_eq!(one_in_a_list(User { id: 4 }).await.unwrap().id, 4);
}
