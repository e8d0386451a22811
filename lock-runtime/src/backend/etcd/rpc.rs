//! A thin gRPC client for the etcd calls this backend makes, on tonic's channel: one HTTP/2
//! connection per member, calls spread over the members, reconnection by the channel itself;
//! TLS (`etcds://`) and etcd's authentication: a token from `Authenticate`, sent with every
//! call and stream, and renewed the way etcd's own client does when etcd says it expired.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use http::uri::PathAndQuery;
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status, Streaming};
use tonic_prost::ProstCodec;

use super::proto;

/// The members of one etcd cluster, as one channel.
#[derive(Clone)]
pub(crate) struct Rpc {
    channel: SmallFrames,
    auth: Option<Arc<Auth>>,
}

/// A user's name and password (`etcd://user:password@…`); the password is never shown.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Credentials {
    pub name: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}:***)", self.name)
    }
}

/// How to reach the cluster: its members, TLS, credentials. Cheap to clone (a lease's revoker
/// keeps one, to revoke on a connection of its own).
#[derive(Clone)]
pub(crate) struct Access {
    pub hosts: Arc<[String]>,
    pub tls: Option<crate::tls::TlsConfig>,
    pub credentials: Option<Credentials>,
}

/// The token of a client with credentials.
struct Auth {
    credentials: Credentials,
    /// The current token; `None` before the first call, or once etcd said it expired.
    token: Mutex<Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>>,
    /// One `Authenticate` at a time.
    renewing: tokio::sync::Mutex<()>,
}

type Token = tonic::metadata::MetadataValue<tonic::metadata::Ascii>;

/// Whether `status` says the call's token is missing, expired or stale: the call is made again
/// with a new one (what etcd's own client does).
fn needs_token(status: &Status) -> bool {
    let message = status.message();
    match status.code() {
        tonic::Code::Unauthenticated => message.contains("invalid auth token"),
        tonic::Code::InvalidArgument => {
            message.contains("user name is empty")
                || message.contains("revision of auth store is old")
        }
        _ => false,
    }
}

/// The sending half of a bidirectional stream; the stream ends when it is dropped.
pub(crate) type Sender<Q> = mpsc::Sender<Q>;

/// A channel balanced over `endpoints`. (`Channel::balance_list` unwraps the sending of each
/// endpoint to the balancer's task, which panics when that task could not start: a runtime
/// shutting down drops it at once, as it did under a lease's revocation on a dropped client.)
fn balanced(endpoints: Vec<Endpoint>) -> Result<Channel, String> {
    let (channel, members) = Channel::balance_channel(endpoints.len());
    for (i, endpoint) in endpoints.into_iter().enumerate() {
        members
            .try_send(tonic::transport::channel::Change::Insert(i, endpoint))
            .map_err(|_| "no connection to etcd can start: the runtime is shutting down")?;
    }
    Ok(channel)
}

impl Rpc {
    /// A channel to the members (`host:port` each), with TLS and credentials. Connects
    /// lazily: the first call tells whether a member can be reached.
    pub(crate) fn new(access: &Access, connect_timeout: Duration) -> Result<Rpc, String> {
        let scheme = if access.tls.is_some() {
            "https"
        } else {
            "http"
        };
        #[cfg(feature = "tls")]
        let tls = access
            .tls
            .as_ref()
            .map(|tls| client_tls(tls, connect_timeout))
            .transpose()?;
        let mut endpoints = Vec::with_capacity(access.hosts.len());
        for host in access.hosts.iter() {
            let endpoint = Endpoint::from_shared(format!("{scheme}://{host}"))
                .map_err(|e| format!("`{host}` is not a valid host: {e}"))?
                .connect_timeout(connect_timeout)
                .tcp_nodelay(true)
                // A member that stops answering (a partition, a paused process) is noticed
                // and its connection replaced, even while no call is under way.
                .http2_keep_alive_interval(Duration::from_secs(2))
                .keep_alive_timeout(Duration::from_secs(2))
                .keep_alive_while_idle(true);
            #[cfg(feature = "tls")]
            let endpoint = match &tls {
                Some(tls) => endpoint
                    .tls_config(tls.clone())
                    .map_err(|e| format!("TLS settings: {}", crate::tls::chain(&e)))?,
                None => endpoint,
            };
            endpoints.push(endpoint);
        }
        let channel = SmallFrames(match endpoints.as_slice() {
            [one] => one.connect_lazy(),
            _ => balanced(endpoints)?,
        });
        let auth = access.credentials.clone().map(|credentials| {
            Arc::new(Auth {
                credentials,
                token: Mutex::new(None),
                renewing: tokio::sync::Mutex::new(()),
            })
        });
        Ok(Rpc { channel, auth })
    }

    fn token(&self) -> Option<Token> {
        let auth = self.auth.as_ref()?;
        auth.token.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Gets a token for the credentials unless one newer than `stale` came meanwhile. A
    /// wrong name or password is the error (`InvalidArgument`, permanent); a cluster without
    /// authentication leaves calls without a token.
    pub(crate) async fn authenticate(&self, stale: Option<&Token>) -> Result<(), Status> {
        let Some(auth) = &self.auth else {
            return Ok(());
        };
        let _one = auth.renewing.lock().await;
        let current = self.token();
        if current.is_some() && current.as_ref() != stale {
            return Ok(()); // renewed by another call meanwhile
        }
        let request = proto::AuthenticateRequest {
            name: auth.credentials.name.clone(),
            password: auth.credentials.password.clone(),
        };
        // Without a token: a stale one makes etcd refuse `Authenticate` itself.
        let answer: Result<proto::AuthenticateResponse, Status> = self
            .unary_once(proto::path::AUTHENTICATE, request, None)
            .await;
        let token = match answer {
            Ok(answer) => Some(Token::try_from(answer.token).map_err(|_| {
                Status::internal("etcd's auth token is not valid as gRPC metadata")
            })?),
            Err(status)
                if status.code() == tonic::Code::FailedPrecondition
                    && status.message().contains("not enabled") =>
            {
                None
            }
            Err(status) if status.code() == tonic::Code::InvalidArgument => {
                return Err(Status::invalid_argument(format!(
                    "authentication as `{}` failed ({}): check the user and password in the \
                     URL (etcd://user:password@host:port)",
                    auth.credentials.name,
                    status.message()
                )));
            }
            Err(status) => return Err(status),
        };
        *auth.token.lock().unwrap_or_else(|p| p.into_inner()) = token;
        Ok(())
    }

    /// Forgets the token if `status` says it expired, so the next call or stream gets a new
    /// one (for streams, whose token is fixed when they open).
    pub(crate) fn note(&self, status: &Status) {
        if needs_token(status) {
            self.token_expired();
        }
    }

    /// Forgets the token: the next call or stream gets a new one.
    pub(crate) fn token_expired(&self) {
        if let Some(auth) = &self.auth {
            auth.token.lock().unwrap_or_else(|p| p.into_inner()).take();
        }
    }

    /// The token for a new call or stream: the current one, or a new one for a client that
    /// has none yet.
    async fn token_for_call(&self) -> Result<Option<Token>, Status> {
        if self.auth.is_some() && self.token().is_none() {
            // Boxed, as below: a rare path kept out of every call's future.
            Box::pin(self.authenticate(None)).await?;
        }
        Ok(self.token())
    }

    /// One request, one reply. A call that finds no member ready, or whose member is gone or
    /// between leaders (`Unavailable`), is tried twice more, 10 and 40 ms later, so a balanced
    /// channel moves on to a live member: every call this backend makes may be repeated (its
    /// writes are conditional or idempotent).
    pub(crate) async fn unary<Q, R>(&self, path: &'static str, request: Q) -> Result<R, Status>
    where
        Q: prost::Message + Clone + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let mut attempt = 1;
        let mut renewed = false;
        loop {
            let token = self.token_for_call().await?;
            match self.unary_once(path, request.clone(), token.as_ref()).await {
                Err(status) if !renewed && self.auth.is_some() && needs_token(&status) => {
                    // Boxed: a call's future holds its largest await's state, and the token's
                    // renewal (a call of its own) would double every call's.
                    Box::pin(self.authenticate(token.as_ref())).await?;
                    renewed = true;
                }
                Err(status) if status.code() == tonic::Code::Unavailable && attempt < 3 => {
                    tokio::time::sleep(crate::backend::retry_pause(attempt)).await;
                    attempt += 1;
                }
                answer => return answer,
            }
        }
    }

    async fn unary_once<Q, R>(
        &self,
        path: &'static str,
        request: Q,
        token: Option<&Token>,
    ) -> Result<R, Status>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready()
            .await
            .map_err(|e| Status::unavailable(format!("no etcd member is ready: {e}")))?;
        let mut request = Request::new(request);
        if let Some(token) = token {
            request.metadata_mut().insert("token", token.clone());
        }
        let response = grpc
            .unary(
                request,
                PathAndQuery::from_static(path),
                ProstCodec::default(),
            )
            .await?;
        Ok(response.into_inner())
    }

    /// Opens a bidirectional stream whose requests are those sent on `requests` (at least one
    /// must be, for etcd to answer the call); see [`stream`](Self::stream).
    pub(crate) async fn stream_of<Q, R>(
        &self,
        path: &'static str,
        requests: mpsc::UnboundedReceiver<Q>,
        require_leader: bool,
    ) -> Result<Streaming<R>, Status>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let requests = futures_util::stream::unfold(requests, |mut requests| async move {
            requests.recv().await.map(|request| (request, requests))
        })
        .boxed();
        self.open(path, requests, require_leader).await
    }

    /// Opens a bidirectional stream whose first request is `first`. `require_leader` makes
    /// the member end the stream when it has no leader (etcd's `WithRequireLeader`), instead
    /// of leaving a watch hanging on a member cut off from the cluster.
    pub(crate) async fn stream<Q, R>(
        &self,
        path: &'static str,
        first: Q,
        require_leader: bool,
    ) -> Result<(Sender<Q>, Streaming<R>), Status>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let (sender, receiver) = mpsc::channel::<Q>(4);
        sender
            .try_send(first)
            .map_err(|_| Status::internal("cannot queue the first request"))?;
        let requests = futures_util::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|request| (request, receiver))
        })
        .boxed();
        Ok((sender, self.open(path, requests, require_leader).await?))
    }

    async fn open<Q, R>(
        &self,
        path: &'static str,
        requests: futures_util::stream::BoxStream<'static, Q>,
        require_leader: bool,
    ) -> Result<Streaming<R>, Status>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let token = self.token_for_call().await?;
        let mut request = Request::new(requests);
        if let Some(token) = token {
            request.metadata_mut().insert("token", token);
        }
        if require_leader {
            request.metadata_mut().insert(
                "hasleader",
                tonic::metadata::MetadataValue::from_static("true"),
            );
        }
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready()
            .await
            .map_err(|e| Status::unavailable(format!("no etcd member is ready: {e}")))?;
        let response = grpc
            .streaming(
                request,
                PathAndQuery::from_static(path),
                ProstCodec::default(),
            )
            .await?;
        Ok(response.into_inner())
    }
}

/// tonic's TLS settings from the client's: the given CA (checked here: tonic skips a file
/// without certificates silently) or the system's roots, the client certificate, and a bound
/// on the handshake (tonic's connect timeout covers the TCP connect only).
#[cfg(feature = "tls")]
fn client_tls(
    tls: &crate::tls::TlsConfig,
    connect_timeout: Duration,
) -> Result<tonic::transport::ClientTlsConfig, String> {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};
    crate::tls::ensure_default_provider();
    let mut config = ClientTlsConfig::new().timeout(connect_timeout);
    config = match &tls.ca_pem {
        Some(pem) => {
            tls.roots()?;
            config.ca_certificate(Certificate::from_pem(pem))
        }
        None => config.with_native_roots(),
    };
    if let (Some(cert), Some(key)) = (&tls.cert_pem, &tls.key_pem) {
        tls.identity()?;
        config = config.identity(Identity::from_pem(cert, key));
    }
    Ok(config)
}

/// The largest DATA frame a request is sent in: h2 copies a frame's payload into its write
/// buffer only below 256 bytes (on a stream with vectored writes: TCP, TLS).
const FRAME_PIECE: usize = 255;

/// The channel, its requests' bodies sent in DATA frames of at most [`FRAME_PIECE`] bytes.
///
/// h2 sends a larger payload by a write of its own, before any frame after it; an
/// acquisition's transaction is 280–350 bytes (its key three times, its value, the queue's
/// range), so each took a `writev` of its own: 64 tasks made 11,491 writes for 16,000 calls,
/// the raw pair's 200-byte requests 4,351, and etcd read 5,723 times against 2,558 (`strace
/// -f`, `DISTLOCK_BENCH_PAIRS=etcd DISTLOCK_BENCH_PAIRS_TASKS=64`). In pieces, the requests of
/// many tasks share one write, over TCP or TLS, to one member or a list.
#[derive(Clone)]
struct SmallFrames(Channel);

impl tower_service::Service<http::Request<tonic::body::Body>> for SmallFrames {
    type Response = http::Response<tonic::body::Body>;
    type Error = tonic::transport::Error;
    type Future = tonic::transport::channel::ResponseFuture;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        tower_service::Service::poll_ready(&mut self.0, cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let request = request.map(|body| {
            tonic::body::Body::new(Pieces {
                body,
                rest: bytes::Bytes::new(),
            })
        });
        tower_service::Service::call(&mut self.0, request)
    }
}

/// A request body whose data comes in pieces of at most [`FRAME_PIECE`] bytes (each piece is
/// a view of the same buffer: nothing is copied).
struct Pieces {
    body: tonic::body::Body,
    /// What is left of the data frame being cut.
    rest: bytes::Bytes,
}

impl http_body::Body for Pieces {
    type Data = bytes::Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Status>>> {
        if self.rest.is_empty() {
            match std::task::ready!(std::pin::Pin::new(&mut self.body).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.rest = data,
                    Err(trailers) => return std::task::Poll::Ready(Some(Ok(trailers))),
                },
                end => return std::task::Poll::Ready(end),
            }
        }
        let piece = self.rest.len().min(FRAME_PIECE);
        let piece = self.rest.split_to(piece);
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let inner = self.body.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = http_body::SizeHint::new();
        hint.set_lower(inner.lower() + rest);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + rest);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;

    /// A channel to several members made while its runtime shuts down (a lease revoked as a
    /// dropped client's runtime goes) is an error, not a panic in tonic's `balance_list`; on a
    /// running runtime it is made.
    #[test]
    fn a_balanced_channel_made_while_the_runtime_shuts_down_is_an_error() {
        let members = || {
            ["http://127.0.0.1:1", "http://127.0.0.1:2"]
                .map(Endpoint::from_static)
                .to_vec()
        };
        struct MakesOnDrop(
            Option<std::sync::mpsc::Sender<Result<(), String>>>,
            Vec<Endpoint>,
        );
        impl Drop for MakesOnDrop {
            fn drop(&mut self) {
                let made = balanced(std::mem::take(&mut self.1)).map(|_| ());
                if let Some(told) = self.0.take() {
                    let _ = told.send(made);
                }
            }
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        assert!(runtime.block_on(async { balanced(members()) }).is_ok());
        let (told, made) = std::sync::mpsc::channel();
        let on_drop = MakesOnDrop(Some(told), members());
        runtime.spawn(async move {
            let _on_drop = on_drop;
            std::future::pending::<()>().await
        });
        runtime.block_on(tokio::task::yield_now());
        drop(runtime);
        let made = made.recv().expect("the task was dropped");
        assert!(
            made.as_ref().is_err_and(|e| e.contains("shutting down")),
            "{made:?}"
        );
    }

    /// Drains `body`, returning the length of each data frame.
    fn pieces(body: tonic::body::Body) -> Vec<usize> {
        let mut body = std::pin::pin!(Pieces {
            body,
            rest: bytes::Bytes::new(),
        });
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut lengths = Vec::new();
        while let std::task::Poll::Ready(Some(frame)) = body.as_mut().poll_frame(&mut cx) {
            lengths.push(frame.unwrap().into_data().unwrap().len());
        }
        assert!(body.is_end_stream());
        lengths
    }

    #[test]
    fn a_body_goes_out_in_pieces_below_h2s_copy_threshold() {
        let data: Vec<u8> = (0..700u32).map(|i| i as u8).collect();
        assert_eq!(
            pieces(tonic::body::Body::new(one_frame(data.clone()))),
            [255, 255, 190]
        );
        assert_eq!(pieces(tonic::body::Body::new(one_frame(vec![7; 40]))), [40]);
        assert_eq!(pieces(tonic::body::Body::empty()), Vec::<usize>::new());
    }

    /// A body of one data frame.
    fn one_frame(data: Vec<u8>) -> impl http_body::Body<Data = bytes::Bytes, Error = Status> {
        struct Once(Option<bytes::Bytes>);
        impl http_body::Body for Once {
            type Data = bytes::Bytes;
            type Error = Status;
            fn poll_frame(
                mut self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Status>>>
            {
                std::task::Poll::Ready(self.0.take().map(|data| Ok(http_body::Frame::data(data))))
            }
            fn is_end_stream(&self) -> bool {
                self.0.is_none()
            }
        }
        Once(Some(data.into()))
    }
}
