use distlock::{LockError, distributed_lock};

/// Not `Serialize`: a shared result must be stored.
pub struct Report {
    pub total: u64,
}

#[distributed_lock(key = "report:<id>", share = "60s")]
async fn report(id: u64) -> Result<Report, LockError> {
    Ok(Report { total: id })
}

fn main() {
    let _ = report(1);
}
