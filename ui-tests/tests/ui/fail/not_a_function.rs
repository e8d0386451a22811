use distlock::distributed_lock;

#[distributed_lock(key = "a")]
struct NotAFunction;

fn main() {}
