use distlock::distributed_lock;

#[distributed_lock(key = "order:<id>")]
async fn plain_value(id: u64) -> u64 {
    id
}

fn main() {}
