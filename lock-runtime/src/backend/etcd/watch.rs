//! One etcd watch stream per client, carrying every watch it sets.
//!
//! etcd serves any number of watches on one `Watch` stream, each under the id its created
//! reply gives, answered in the order they were asked for (a stream's requests are handled one
//! at a time). A held lock's loss watch and a waiter's watch on its predecessor were each a
//! stream of their own: an HTTP/2 stream opened at the grant and reset at the release, with
//! the task that pipes its requests — most of the client's own work per lock + release beyond
//! the two calls. Here they are a create request and a cancel request on one stream, read by
//! one task that hands each answer to its watch.
//!
//! When the stream fails (its member went away, lost its leader, or the task's runtime shut
//! down), every watch on it gets the error — as a watch on a stream of its own would — and the
//! next watch opens a new stream.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::mpsc;
use tonic::Status;

use super::proto::{self, WatchRequest, WatchRequestUnion, WatchResponse, path};
use super::rpc::Rpc;

/// The client's shared watch stream, opened on first use and again after it fails.
pub(crate) struct Watches {
    rpc: Rpc,
    current: Mutex<Option<Arc<Mux>>>,
}

/// One watch stream: the requests going out, and where its answers go.
struct Mux {
    requests: mpsc::UnboundedSender<WatchRequest>,
    routes: Arc<Mutex<Routes>>,
    /// Dropped with the stream's last user: its task then ends, and with it the stream (etcd
    /// keeps a stream whose requests ended open, so the task cannot wait for that).
    _close: tokio::sync::oneshot::Sender<()>,
}

/// Where a watch's answers go.
type Route = mpsc::UnboundedSender<Result<WatchResponse, Status>>;

#[derive(Default)]
struct Routes {
    /// Watches asked for and not yet created, in the order their requests went out.
    pending: VecDeque<PendingWatch>,
    /// Created watches, by the id etcd gave them.
    active: HashMap<i64, Route>,
    /// Why the stream ended, once it has: no watch is set on it any more.
    ended: Option<Status>,
}

struct PendingWatch {
    route: Route,
    /// Filled in with the watch's id when it is created (read under the routes' lock).
    id: Arc<std::sync::atomic::AtomicI64>,
}

/// A watch id not given yet.
const UNKNOWN: i64 = i64::MIN;

impl Routes {
    /// Ends the stream's routes: every watch on it, and every one still asked for, gets
    /// `status`.
    fn end(&mut self, status: Status) {
        if self.ended.is_some() {
            return;
        }
        for pending in self.pending.drain(..) {
            let _ = pending.route.send(Err(status.clone()));
        }
        for (_, route) in self.active.drain() {
            let _ = route.send(Err(status.clone()));
        }
        self.ended = Some(status);
    }
}

fn lock(routes: &Mutex<Routes>) -> MutexGuard<'_, Routes> {
    routes.lock().unwrap_or_else(|p| p.into_inner())
}

/// A watch on the shared stream: its answers, in order; cancelled on the stream when dropped.
pub(crate) struct EtcdWatch {
    answers: mpsc::UnboundedReceiver<Result<WatchResponse, Status>>,
    id: Arc<std::sync::atomic::AtomicI64>,
    mux: Arc<Mux>,
}

impl Watches {
    pub(crate) fn new(rpc: Rpc) -> Watches {
        Watches {
            rpc,
            current: Mutex::new(None),
        }
    }

    /// Sets a watch of `key` (to `range_end`, if not empty) from revision `start` (0: from
    /// now), without the events `filters` leaves out. Its first answer is its created reply.
    pub(crate) fn open(
        &self,
        key: Vec<u8>,
        range_end: Vec<u8>,
        start: i64,
        filters: Vec<i32>,
    ) -> EtcdWatch {
        let create = WatchRequest {
            request_union: Some(WatchRequestUnion::Create(proto::WatchCreateRequest {
                key,
                range_end,
                start_revision: start,
                filters,
            })),
        };
        let (route, answers) = mpsc::unbounded_channel();
        let id = Arc::new(std::sync::atomic::AtomicI64::new(UNKNOWN));
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let (mux, fresh) = match current.as_ref() {
                Some(mux) => (Arc::clone(mux), false),
                None => {
                    let mux = self.start();
                    *current = Some(Arc::clone(&mux));
                    (mux, true)
                }
            };
            let mut routes = lock(&mux.routes);
            // Queued and sent under the routes' lock: the pending queue is in the order the
            // requests go out, which is the order etcd answers them.
            if routes.ended.is_none() && mux.requests.send(create.clone()).is_ok() {
                routes.pending.push_back(PendingWatch {
                    route,
                    id: Arc::clone(&id),
                });
                drop(routes);
                return EtcdWatch { answers, id, mux };
            }
            drop(routes);
            if fresh {
                // A stream that ended as it was opened: its runtime is shutting down (the task
                // was dropped at its spawn), or it failed at once. This watch ends now (its
                // route is dropped unused), rather than opening stream after stream — a spin
                // that once kept a shutting-down runtime from ever finishing.
                return EtcdWatch { answers, id, mux };
            }
            *current = None;
        }
    }

    /// Opens a new stream: a task of the current runtime sends its requests and hands out
    /// its answers.
    fn start(&self) -> Arc<Mux> {
        let (requests, outgoing) = mpsc::unbounded_channel();
        let routes = Arc::new(Mutex::new(Routes::default()));
        let reader = Reader {
            routes: Arc::clone(&routes),
        };
        let rpc = self.rpc.clone();
        let cancels = requests.downgrade();
        let (close, closed) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let reader = reader;
            let status = tokio::select! {
                ended = reader.read(&rpc, outgoing, &cancels) => ended,
                _ = closed => Status::cancelled("the client is gone"),
            };
            lock(&reader.routes).end(status);
        });
        Arc::new(Mux {
            requests,
            routes,
            _close: close,
        })
    }
}

/// The task reading a stream's answers. Dropped (its runtime shut down, say), it ends the
/// stream's routes, so no watch waits on answers that will never come.
struct Reader {
    routes: Arc<Mutex<Routes>>,
}

impl Drop for Reader {
    fn drop(&mut self) {
        lock(&self.routes).end(Status::unavailable("the watch stream's task ended"));
    }
}

impl Reader {
    /// Opens the stream and routes its answers until it fails: returns why.
    async fn read(
        &self,
        rpc: &Rpc,
        outgoing: mpsc::UnboundedReceiver<WatchRequest>,
        cancels: &mpsc::WeakUnboundedSender<WatchRequest>,
    ) -> Status {
        let mut answers = match rpc.stream_of(path::WATCH, outgoing, true).await {
            Ok(answers) => answers,
            Err(status) => return status,
        };
        loop {
            match answers.message().await {
                Ok(Some(answer)) => {
                    if let Some(ended) = self.route(answer, cancels) {
                        rpc.token_expired();
                        return ended;
                    }
                }
                Ok(None) => return Status::unavailable("the watch stream ended"),
                Err(status) => {
                    rpc.note(&status);
                    return status;
                }
            }
        }
    }

    /// Hands `answer` to its watch; `Some` when the stream is no use any more: its token
    /// expired (it was fixed when the stream opened, and every watch set on it would be
    /// refused), so this watch and the others end with that status, and the next watch opens a
    /// stream with a new token.
    fn route(
        &self,
        answer: WatchResponse,
        cancels: &mpsc::WeakUnboundedSender<WatchRequest>,
    ) -> Option<Status> {
        let mut routes = lock(&self.routes);
        if answer.created {
            let pending = routes.pending.pop_front()?;
            let id = answer.watch_id;
            if answer.canceled {
                let reason = &answer.cancel_reason;
                if reason.contains("invalid auth token")
                    || reason.contains("revision of auth store is old")
                    || reason.contains("user name is empty")
                {
                    routes.pending.push_front(pending);
                    // Unavailable: waiting cures it (a new stream, a new token).
                    return Some(Status::unavailable(format!(
                        "the watch stream's auth token expired (etcd refused a watch: {reason})"
                    )));
                }
                // Refused at creation: the watch ends with it.
                let _ = pending.route.send(Ok(answer));
                return None;
            }
            pending.id.store(id, std::sync::atomic::Ordering::Relaxed);
            if pending.route.send(Ok(answer)).is_ok() {
                routes.active.insert(id, pending.route);
            } else if let Some(requests) = cancels.upgrade() {
                // Dropped before it was created: taken back at once.
                let _ = requests.send(cancel(id));
            }
            return None;
        }
        if answer.canceled {
            // Cancelled by etcd (its history compacted, say) or at our asking: the watch is
            // over; the answer says why.
            if let Some(route) = routes.active.remove(&answer.watch_id) {
                let _ = route.send(Ok(answer));
            }
            return None;
        }
        // A watch dropped as this answer came takes itself out of `active`: nothing to deliver.
        if let Some(route) = routes.active.get(&answer.watch_id) {
            let _ = route.send(Ok(answer));
        }
        None
    }
}

fn cancel(id: i64) -> WatchRequest {
    WatchRequest {
        request_union: Some(WatchRequestUnion::Cancel(proto::WatchCancelRequest {
            watch_id: id,
        })),
    }
}

impl EtcdWatch {
    /// The watch's next answer; an error once its stream has failed. A cancelled watch's
    /// answer says so (see `next_answer`).
    pub(crate) async fn answer(&mut self) -> Result<WatchResponse, Status> {
        match self.answers.recv().await {
            Some(answer) => answer,
            None => Err(Status::unavailable("the watch stream ended")),
        }
    }
}

impl Drop for EtcdWatch {
    fn drop(&mut self) {
        let mut routes = lock(&self.mux.routes);
        let id = self.id.load(std::sync::atomic::Ordering::Relaxed);
        // Still pending: the reader takes it back when its created reply comes (its route is
        // closed now). Created: taken back here, unless the stream (or etcd) ended it.
        if id != UNKNOWN && routes.active.remove(&id).is_some() {
            let _ = self.mux.requests.send(cancel(id));
        }
    }
}
