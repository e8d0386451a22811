use std::fmt::Display;

use distlock::{LockClient, LockError, distributed_lock};

#[distributed_lock(key = "generic:<id>")]
async fn generic<T, U>(id: T, payload: U) -> Result<U, LockError>
where
    T: Display + Send,
    U: Clone,
{
    let _ = id;
    Ok(payload.clone())
}

#[distributed_lock(key = "impl:<id>:<name>")]
async fn impl_trait(id: impl Display, name: &impl Display) -> Result<String, LockError> {
    Ok(format!("{id}-{name}"))
}

#[distributed_lock(key = "borrowed:<name>")]
async fn lifetimes<'a, 'b: 'a>(name: &'a str, rest: &'b [u8]) -> Result<&'a str, LockError> {
    let _ = rest;
    Ok(name)
}

struct Wrapper<T>(T);

impl<T: Display + Sync> Wrapper<T> {
    #[distributed_lock(key = "wrapped:<self.0>")]
    async fn get(&self) -> Result<&T, LockError> {
        Ok(&self.0)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    distlock::init(LockClient::connect("memory://").await.unwrap()).unwrap();
    assert_eq!(generic(1u8, vec![1]).await.unwrap(), vec![1]);
    assert_eq!(impl_trait(1, &"a").await.unwrap(), "1-a");
    assert_eq!(lifetimes("x", b"y").await.unwrap(), "x");
    assert_eq!(*Wrapper(5).get().await.unwrap(), 5);
}
