//! A thin gRPC client for the etcd calls this backend makes, on tonic's channel: one HTTP/2
//! connection per member, calls spread over the members, reconnection by the channel itself.

use std::time::Duration;

use futures_util::StreamExt;
use http::uri::PathAndQuery;
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status, Streaming};
use tonic_prost::ProstCodec;

/// The members of one etcd cluster, as one channel.
#[derive(Clone)]
pub(crate) struct Rpc {
    channel: Channel,
}

/// The sending half of a bidirectional stream; the stream ends when it is dropped.
pub(crate) type Sender<Q> = mpsc::Sender<Q>;

impl Rpc {
    /// A channel to `hosts` (`host:port` each). Connects lazily: the first call tells whether
    /// a member can be reached.
    pub(crate) fn new(hosts: &[String], connect_timeout: Duration) -> Result<Rpc, String> {
        let mut endpoints = Vec::with_capacity(hosts.len());
        for host in hosts {
            let endpoint = Endpoint::from_shared(format!("http://{host}"))
                .map_err(|e| format!("`{host}` is not a valid host: {e}"))?
                .connect_timeout(connect_timeout)
                .tcp_nodelay(true)
                // A member that stops answering (a partition, a paused process) is noticed
                // and its connection replaced, even while no call is under way.
                .http2_keep_alive_interval(Duration::from_secs(2))
                .keep_alive_timeout(Duration::from_secs(2))
                .keep_alive_while_idle(true);
            endpoints.push(endpoint);
        }
        let channel = match endpoints.as_slice() {
            [one] => one.connect_lazy(),
            _ => Channel::balance_list(endpoints.into_iter()),
        };
        Ok(Rpc { channel })
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
        loop {
            match self.unary_once(path, request.clone()).await {
                Err(status) if status.code() == tonic::Code::Unavailable && attempt < 3 => {
                    tokio::time::sleep(crate::backend::retry_pause(attempt)).await;
                    attempt += 1;
                }
                answer => return answer,
            }
        }
    }

    async fn unary_once<Q, R>(&self, path: &'static str, request: Q) -> Result<R, Status>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready()
            .await
            .map_err(|e| Status::unavailable(format!("no etcd member is ready: {e}")))?;
        let response = grpc
            .unary(
                Request::new(request),
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
        let mut request = Request::new(requests);
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
