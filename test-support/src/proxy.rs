//! A TCP proxy between a client and one server that can hold back the server's replies, drop
//! everything (a blackhole: connections stay open, nothing arrives), or cut every connection:
//! the network faults no real server produces on demand.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Listens on a free loopback port and forwards to `127.0.0.1:<target>`; requests and replies
/// are held back by the current delays (read when each chunk arrives). Runs on the test's
/// runtime and stops with it.
pub struct DelayProxy {
    port: u16,
    /// Reply delay: `min << 32 | max` in ms, a random value in that range for each chunk.
    delay_ms: Arc<AtomicU64>,
    request_delay_ms: Arc<AtomicU64>,
    faults: Arc<Faults>,
}

/// Blackhole and cut state shared with the forwarding tasks.
#[derive(Default)]
struct Faults {
    blackhole: AtomicBool,
    /// Replies are dropped (requests still reach the server): a command applied whose answer
    /// never comes back.
    drop_replies: AtomicBool,
    /// New connections are closed at once until this instant.
    refuse_until: Mutex<Option<Instant>>,
    /// The forwarding tasks of the open connections, aborted (sockets closed) by a cut.
    open: Mutex<Vec<tokio::task::AbortHandle>>,
}

impl DelayProxy {
    pub async fn start(target: u16) -> DelayProxy {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("proxy listens");
        let port = listener.local_addr().expect("proxy address").port();
        let delay_ms = Arc::new(AtomicU64::new(0));
        let request_delay_ms = Arc::new(AtomicU64::new(0));
        let delay = Arc::clone(&delay_ms);
        let request = Arc::clone(&request_delay_ms);
        let faults = Arc::new(Faults::default());
        let shared_faults = Arc::clone(&faults);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let refused = shared_faults
                    .refuse_until
                    .lock()
                    .unwrap()
                    .is_some_and(|until| Instant::now() < until);
                if refused {
                    drop(client);
                    continue;
                }
                let delay = Arc::clone(&delay);
                let requests = Arc::clone(&request);
                let faults = Arc::clone(&shared_faults);
                let upstream_faults = Arc::clone(&shared_faults);
                let task = tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    let (mut client_read, mut client_write) = client.into_split();
                    let (mut server_read, mut server_write) = server.into_split();
                    let request_delay = Arc::clone(&requests);
                    let upstream = tokio::spawn(async move {
                        let mut buffer = vec![0u8; 16 * 1024];
                        loop {
                            let n = match client_read.read(&mut buffer).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            let ms = request_delay.load(Ordering::SeqCst);
                            if ms > 0 {
                                tokio::time::sleep(Duration::from_millis(ms)).await;
                            }
                            if upstream_faults.blackhole.load(Ordering::SeqCst) {
                                continue;
                            }
                            if server_write.write_all(&buffer[..n]).await.is_err() {
                                break;
                            }
                        }
                    });
                    faults.open.lock().unwrap().push(upstream.abort_handle());
                    let mut buffer = vec![0u8; 16 * 1024];
                    loop {
                        let n = match server_read.read(&mut buffer).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        let range = delay.load(Ordering::SeqCst);
                        if range > 0 {
                            let ms = fastrand::u64((range >> 32)..=(range & 0xffff_ffff));
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                        }
                        if faults.blackhole.load(Ordering::SeqCst)
                            || faults.drop_replies.load(Ordering::SeqCst)
                        {
                            continue;
                        }
                        if client_write.write_all(&buffer[..n]).await.is_err() {
                            break;
                        }
                    }
                    upstream.abort();
                });
                let mut open = shared_faults.open.lock().unwrap();
                open.retain(|t| !t.is_finished());
                open.push(task.abort_handle());
            }
        });
        DelayProxy {
            port,
            delay_ms,
            request_delay_ms,
            faults,
        }
    }

    /// From now on, drops everything in both directions while keeping the connections open:
    /// requests never reach the server, replies never reach the client.
    pub fn set_blackhole(&self, on: bool) {
        self.faults.blackhole.store(on, Ordering::SeqCst);
    }

    /// From now on, passes requests to the server but drops its replies (connections stay
    /// open): what the server did is never confirmed. Cut the connections after turning it off
    /// (a connection that lost part of a reply stream is no use to its client).
    pub fn set_drop_replies(&self, on: bool) {
        self.faults.drop_replies.store(on, Ordering::SeqCst);
    }

    /// Closes every open connection at once and refuses new ones for `refuse`: a cable pulled
    /// and plugged back in.
    pub fn cut(&self, refuse: Duration) {
        *self.faults.refuse_until.lock().unwrap() = Some(Instant::now() + refuse);
        for task in self.faults.open.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Holds every request from now on back by `delay` before passing it to the server.
    pub fn set_request_delay(&self, delay: Duration) {
        self.request_delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Holds every reply from now on back by `delay`.
    pub fn set_delay(&self, delay: Duration) {
        self.set_delay_range(delay, delay);
    }

    /// Holds every chunk of replies from now on back by a random time in `min..=max` (chunks
    /// stay in order, so a chunk may also wait for the one before it).
    pub fn set_delay_range(&self, min: Duration, max: Duration) {
        let (min, max) = (min.as_millis() as u64, max.as_millis() as u64);
        self.delay_ms
            .store((min << 32) | max.max(min), Ordering::SeqCst);
    }
}
