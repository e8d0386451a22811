//! A TCP proxy between a client and one server that can hold back the server's replies: the
//! fault no real server produces on demand (a slow network or an overloaded node).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Listens on a free loopback port and forwards to `127.0.0.1:<target>`; requests and replies
/// are held back by the current delays (read when each chunk arrives). Runs on the test's
/// runtime and stops with it.
pub struct DelayProxy {
    port: u16,
    delay_ms: Arc<AtomicU64>,
    request_delay_ms: Arc<AtomicU64>,
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
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let delay = Arc::clone(&delay);
                let requests = Arc::clone(&request);
                tokio::spawn(async move {
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
                            if server_write.write_all(&buffer[..n]).await.is_err() {
                                break;
                            }
                        }
                    });
                    let mut buffer = vec![0u8; 16 * 1024];
                    loop {
                        let n = match server_read.read(&mut buffer).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        let ms = delay.load(Ordering::SeqCst);
                        if ms > 0 {
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                        }
                        if client_write.write_all(&buffer[..n]).await.is_err() {
                            break;
                        }
                    }
                    upstream.abort();
                });
            }
        });
        DelayProxy {
            port,
            delay_ms,
            request_delay_ms,
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
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }
}
