//! A web handler locked per path parameter: `POST /orders/{id}/pay` charges an order once,
//! however many times the button is clicked. Requests for the same order wait for each other
//! (up to 5 s); different orders run in parallel.
//!
//! ```text
//! cargo run --example web_handler                  # listens on 127.0.0.1:3000 (PORT=… to change)
//! curl -X POST localhost:3000/orders/7/pay          # 200 paid
//! curl -X POST localhost:3000/orders/7/pay          # 409 already paid
//! curl localhost:3000/orders/7                      # charged 1 time(s)
//! curl localhost:3000/locks                         # the locks held now, and by whom
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example web_handler   # the locks on Redis
//! ```
//!
//! The lock client is in the router's state beside the data (`AppState`), and the locked function
//! names it with `client = state.locks`: no global client. The orders are kept in this process;
//! in a service with replicas they live in the database every replica shares, and the lock
//! keeps each order's check and write together across the replicas. Either way the locked
//! write is ONE step (here one critical section; there one statement or one transaction): a
//! lease lost at an `.await` drops the body there, and two writes in two awaits could be cut
//! apart.
//!
//! Logs go through `tracing`, printed by `tracing_subscriber::fmt()`: each request's span
//! (`pay{id=7}`) with its events, distlock's spans under it, one line as each ends
//! (`pay{id=7}:distlock.hold{key=order:7:payment … held_ms=22 ended="released"}: … close`), and
//! distlock's warnings (a lost lock, a failed renewal).
//!
//! With the `metrics` feature (`cargo run --features metrics --example web_handler`), and only
//! then, it also serves distlock's metrics at `/metrics` in the Prometheus text format, through
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

/// The router's state: the lock client, and the data its locks protect.
struct AppState {
    locks: LockClient,
    orders: Mutex<HashMap<u64, Order>>,
}

#[derive(Clone, Copy, Default)]
struct Order {
    charges: u32,
    paid: bool,
}

enum Payment {
    Charged,
    AlreadyPaid,
}

/// Charges order `id` unless it is paid already. Check-then-charge is safe because no other
/// request for the same order runs between the check and the write.
#[distributed_lock(key = "order:<id>:payment", lease = "10s", wait = "5s", client = state.locks)]
async fn pay_order(state: &AppState, id: u64) -> Result<Payment, BoxError> {
    let paid = state
        .orders
        .lock()
        .unwrap()
        .get(&id)
        .is_some_and(|o| o.paid);
    if paid {
        return Ok(Payment::AlreadyPaid);
    }
    charge_card(id).await?;
    // The write: both fields in one step, after the last `.await`.
    let charges = {
        let mut orders = state.orders.lock().unwrap();
        let order = orders.entry(id).or_default();
        order.charges += 1;
        order.paid = true;
        order.charges
    };
    tracing::info!(order = id, charges, "charged");
    Ok(Payment::Charged)
}

/// The payment provider's round trip. A real provider takes the order id as its idempotency
/// key, so a retry after a lease lost here is not a second charge.
async fn charge_card(_order: u64) -> Result<(), BoxError> {
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(())
}

#[tracing::instrument(skip(state))]
async fn pay(State(state): State<Arc<AppState>>, Path(id): Path<u64>) -> (StatusCode, String) {
    match pay_order(&state, id).await {
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
            _ => {
                tracing::error!(order = id, %error, "payment failed");
                (StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n"))
            }
        },
    }
}

async fn show(State(state): State<Arc<AppState>>, Path(id): Path<u64>) -> String {
    let order = state.orders.lock().unwrap().get(&id).copied();
    let charges = order.unwrap_or_default().charges;
    format!("order {id}: charged {charges} time(s)\n")
}

/// `GET /locks`: an admin view of the locks held now, by any process on the same store (the
/// same data as `distlock list`): key, holder, lease left.
async fn locks(State(state): State<Arc<AppState>>) -> (StatusCode, String) {
    match state.locks.list("*", 100).await {
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

/// `GET /metrics` (with the `metrics` feature): everything recorded through the `metrics`
/// facade, distlock's metrics among it. The recorder is installed before the lock client is
/// built, so the client describes its metrics (help texts, units) to it.
#[cfg(feature = "metrics")]
fn serve_metrics(router: Router<Arc<AppState>>) -> Result<Router<Arc<AppState>>, BoxError> {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
    Ok(router.route("/metrics", get(move || std::future::ready(handle.render()))))
}

#[cfg(not(feature = "metrics"))]
fn serve_metrics(router: Router<Arc<AppState>>) -> Result<Router<Arc<AppState>>, BoxError> {
    Ok(router)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .init();
    let router = serve_metrics(Router::new())?;
    let url = std::env::var(LockClient::URL_ENV).unwrap_or_else(|_| "memory://".into());
    let state = Arc::new(AppState {
        locks: LockClient::connect(&url).await?,
        orders: Mutex::default(),
    });
    let router = router
        .route("/orders/{id}/pay", post(pay))
        .route("/orders/{id}", get(show))
        .route("/locks", get(locks))
        .with_state(state);
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    tracing::info!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, router).await?;
    Ok(())
}
