//! A web handler locked per path parameter: `POST /orders/{id}/pay` charges an order once,
//! however many times the button is clicked, in however many replicas of the service.
//! Requests for the same order wait for each other (up to 5 s); different orders run in
//! parallel.
//!
//! ```text
//! cargo run --example web_handler                  # listens on 127.0.0.1:3000 (PORT=… to change)
//! curl -X POST localhost:3000/orders/7/pay          # 200 paid
//! curl -X POST localhost:3000/orders/7/pay          # 409 already paid
//! curl localhost:3000/orders/7                      # charged 1 time(s)
//! curl localhost:3000/locks                         # the locks held now, and by whom
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example web_handler   # replicas share Redis
//! ```
//!
//! The orders live in a map in the process, or with `redis://` in Redis keys
//! (`distlock-example:web:order:<id>:…`) that every replica shares.
//!
//! With the `metrics` feature (`cargo run --features metrics --example web_handler`) it also
//! serves distlock's metrics in the Prometheus text format, through
//! `metrics-exporter-prometheus` installed as the `metrics` recorder:
//!
//! ```text
//! curl localhost:3000/metrics   # distlock_acquisitions_total{backend="memory",outcome="acquired"} 1 …
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use distlock::{BoxError, LockClient, LockError, distributed_lock};

/// Named numbers: Redis keys `<namespace>:<name>` with a `redis://` URL, else a map in this
/// process. Each read and write is its own step: only the lock keeps them together.
struct Kv {
    namespace: String,
    redis: Option<redis::aio::MultiplexedConnection>,
    memory: Mutex<HashMap<String, u64>>,
}

impl Kv {
    async fn open(url: &str, namespace: String) -> Result<Kv, BoxError> {
        let redis = if url.starts_with("redis://") {
            Some(
                redis::Client::open(url)?
                    .get_multiplexed_async_connection()
                    .await?,
            )
        } else {
            None
        };
        Ok(Kv {
            namespace,
            redis,
            memory: Mutex::default(),
        })
    }

    async fn get(&self, name: &str) -> Result<u64, BoxError> {
        let Some(conn) = &self.redis else {
            return Ok(self.memory.lock().unwrap().get(name).copied().unwrap_or(0));
        };
        let key = format!("{}:{name}", self.namespace);
        let value: Option<u64> = redis::cmd("GET")
            .arg(key)
            .query_async(&mut conn.clone())
            .await?;
        Ok(value.unwrap_or(0))
    }

    async fn set(&self, name: &str, value: u64) -> Result<(), BoxError> {
        let Some(conn) = &self.redis else {
            self.memory.lock().unwrap().insert(name.to_owned(), value);
            return Ok(());
        };
        let key = format!("{}:{name}", self.namespace);
        let () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query_async(&mut conn.clone())
            .await?;
        Ok(())
    }
}

enum Payment {
    Charged,
    AlreadyPaid,
}

/// Charges order `id` unless it is paid already. Check-then-charge is only safe because no
/// other request for the same order runs between the check and the write.
#[distributed_lock(key = "order:<id>:payment", lease = "10s", wait = "5s")]
async fn pay_order(id: u64, store: &Kv) -> Result<Payment, BoxError> {
    let paid = format!("order:{id}:paid");
    if store.get(&paid).await? == 1 {
        return Ok(Payment::AlreadyPaid);
    }
    tokio::time::sleep(Duration::from_millis(20)).await; // the payment provider's round trip
    let charges = format!("order:{id}:charges");
    let charged = store.get(&charges).await?;
    store.set(&charges, charged + 1).await?;
    store.set(&paid, 1).await?;
    Ok(Payment::Charged)
}

async fn pay(Path(id): Path<u64>, State(store): State<Arc<Kv>>) -> (StatusCode, String) {
    match pay_order(id, &store).await {
        Ok(Payment::Charged) => (StatusCode::OK, format!("order {id} paid\n")),
        Ok(Payment::AlreadyPaid) => (
            StatusCode::CONFLICT,
            format!("order {id} was already paid\n"),
        ),
        Err(error) => match error.downcast_ref::<LockError>() {
            Some(error) if error.is_busy() => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("order {id} is busy, try again\n"),
            ),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")),
        },
    }
}

async fn show(Path(id): Path<u64>, State(store): State<Arc<Kv>>) -> (StatusCode, String) {
    match store.get(&format!("order:{id}:charges")).await {
        Ok(charges) => (
            StatusCode::OK,
            format!("order {id}: charged {charges} time(s)\n"),
        ),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")),
    }
}

/// `GET /locks`: an admin view of the locks held now, by any replica (the same data as
/// `distlock list`): key, holder, lease left.
async fn locks() -> (StatusCode, String) {
    let listed = match distlock::client() {
        Ok(client) => client.list("*", 100).await,
        Err(error) => Err(error),
    };
    match listed {
        Ok(locks) if locks.is_empty() => (StatusCode::OK, "no lock is held\n".to_owned()),
        Ok(locks) => {
            let mut body = String::new();
            for lock in locks {
                let holder = lock
                    .holder
                    .map_or_else(|| "an unknown holder".to_owned(), |h| h.to_string());
                let left = lock
                    .ttl
                    .map_or_else(String::new, |ttl| format!(", {ttl:.1?} left"));
                body.push_str(&format!("{} held by {holder}{left}\n", lock.key));
            }
            (StatusCode::OK, body)
        }
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")),
    }
}

/// `GET /metrics`: everything recorded through the `metrics` facade, distlock's metrics among
/// it. The recorder is installed before the lock client is built, so the client describes its
/// metrics (help texts, units) to it.
#[cfg(feature = "metrics")]
fn serve_metrics(app: Router<Arc<Kv>>) -> Result<Router<Arc<Kv>>, BoxError> {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
    Ok(app.route("/metrics", get(move || std::future::ready(handle.render()))))
}

#[cfg(not(feature = "metrics"))]
fn serve_metrics(app: Router<Arc<Kv>>) -> Result<Router<Arc<Kv>>, BoxError> {
    Ok(app)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let app = serve_metrics(Router::new())?;
    let url = std::env::var(distlock::LockClient::URL_ENV).unwrap_or_else(|_| "memory://".into());
    distlock::init(LockClient::connect(&url).await?)?;
    let store = Arc::new(Kv::open(&url, "distlock-example:web".into()).await?);
    let app = app
        .route("/orders/{id}/pay", post(pay))
        .route("/orders/{id}", get(show))
        .route("/locks", get(locks))
        .with_state(store);
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
