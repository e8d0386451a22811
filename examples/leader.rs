//! Leader election: three candidates campaign in the election `reports`
//! (`client.election(…).campaign(identity)`); the one that wins leads — its lease renewed while
//! it lives, its term a fencing token that rises with every leader — and the others wait in
//! line, without polling. When the leader dies without a word (`kill -9`), its lease runs out
//! and a standby leads, one lease later at most. `election.leader()` names the leader and its
//! term from anywhere.
//!
//! With a networked backend the candidates are processes (copies of this example) and the
//! leader is killed with SIGKILL; `memory://` lives in one process, so there they are threads,
//! and the leader "dies" by freezing — its runtime stops, so it neither renews nor resigns.
//!
//! ```text
//! cargo run --example leader
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example leader
//! ```

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use distlock::{BoxError, Leadership, LockClient, LockError};

const KEY: &str = "reports";
/// How long a dead leader keeps the lock: the takeover takes at most about this long.
const LEASE: Duration = Duration::from_secs(2);
const CANDIDATES: usize = 3;

/// A candidate: campaigns as `name` as long as it takes, leads while it holds the election,
/// and campaigns again if it loses it. Returns its leadership when `stop` fires while it leads.
async fn candidate(
    name: &str,
    client: &LockClient,
    stop: impl std::future::Future<Output = ()>,
) -> Result<Option<Leadership>, LockError> {
    tokio::pin!(stop);
    let election = client.election(KEY).lease(LEASE);
    loop {
        let leadership = tokio::select! {
            won = election.campaign(name) => won?,
            () = &mut stop => return Ok(None),
        };
        println!("{name}: leading, term {}", leadership.term());
        tokio::select! {
            () = leadership.lost() => println!("{name}: lost the leadership; campaigning again"),
            () = lead(name) => unreachable!("a leader's work never ends"),
            () = &mut stop => return Ok(Some(leadership)),
        }
    }
}

/// What only the leader does: here, a heartbeat line now and then.
async fn lead(name: &str) {
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        println!("{name}: still leading");
    }
}

/// The candidates, as processes or (on `memory://`) as threads.
enum Candidates {
    Processes(Vec<Option<Child>>),
    Threads(Vec<Option<tokio::sync::watch::Sender<Option<Ending>>>>),
}

/// How a candidate thread ends: frozen (a simulated crash) or stopped cleanly.
#[derive(Clone, Copy)]
enum Ending {
    Freeze,
    Stop,
}

impl Candidates {
    fn start(url: &str) -> Result<Candidates, BoxError> {
        if !url.starts_with("memory:") {
            let mut children = Vec::new();
            for i in 0..CANDIDATES {
                children.push(Some(
                    std::process::Command::new(std::env::current_exe()?)
                        .args(["candidate", &format!("candidate-{i}")])
                        .env(LockClient::URL_ENV, url)
                        .stdin(Stdio::piped())
                        .spawn()?,
                ));
            }
            return Ok(Candidates::Processes(children));
        }
        let mut threads = Vec::new();
        for i in 0..CANDIDATES {
            let (tell, told) = tokio::sync::watch::channel(None::<Ending>);
            let url = url.to_owned();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime");
                let mut stop_told = told.clone();
                let stop = async move {
                    let _ = stop_told.changed().await;
                };
                let name = format!("candidate-{i}");
                let guard = runtime.block_on(async {
                    let client = LockClient::connect(&url).await?;
                    let leadership = candidate(&name, &client, stop).await?;
                    Ok::<_, LockError>((client, leadership))
                });
                let ending = *told.borrow();
                match (ending, guard) {
                    (Some(Ending::Freeze), Ok(held)) => {
                        // A crash: nothing runs on this runtime again — no renewal, no release.
                        std::mem::forget(held);
                        std::mem::forget(runtime);
                    }
                    (_, Ok((_, Some(leadership)))) => {
                        let _ = runtime.block_on(leadership.resign());
                    }
                    (_, Ok(_)) => {}
                    (_, Err(error)) => eprintln!("{name}: {error}"),
                }
            });
            threads.push(Some(tell));
        }
        Ok(Candidates::Threads(threads))
    }

    /// Ends candidate `i` without a word: SIGKILL, or a frozen thread.
    fn kill(&mut self, i: usize) -> Result<(), BoxError> {
        match self {
            Candidates::Processes(children) => {
                if let Some(mut child) = children[i].take() {
                    child.kill()?; // SIGKILL
                    child.wait()?;
                }
            }
            Candidates::Threads(threads) => {
                if let Some(tell) = threads[i].take() {
                    let _ = tell.send(Some(Ending::Freeze));
                }
            }
        }
        Ok(())
    }

    /// Stops the others cleanly: the leader among them releases the lock.
    fn stop(self) -> Result<(), BoxError> {
        match self {
            Candidates::Processes(children) => {
                for mut child in children.into_iter().flatten() {
                    drop(child.stdin.take()); // end of input: release and exit
                    child.wait()?;
                }
            }
            Candidates::Threads(threads) => {
                for tell in threads.into_iter().flatten() {
                    let _ = tell.send(Some(Ending::Stop));
                }
            }
        }
        Ok(())
    }
}

/// The current leader as the store says: its identity and term.
async fn leader(client: &LockClient) -> Result<Option<(String, u64)>, BoxError> {
    let leader = client.election(KEY).leader().await?;
    Ok(leader.map(|l| (l.identity().to_owned(), l.term())))
}

/// Waits until the store names a leader with a term above `old`.
async fn next_leader(
    client: &LockClient,
    old: u64,
    within: Duration,
) -> Result<(String, u64), BoxError> {
    let deadline = Instant::now() + within;
    loop {
        if let Some((identity, term)) = leader(client).await?
            && term > old
        {
            return Ok((identity, term));
        }
        if Instant::now() > deadline {
            return Err(format!("no new leader within {within:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A candidate process: leads or waits until its input ends (then releases and exits), or
/// until it is killed.
async fn candidate_process(name: &str) -> Result<(), BoxError> {
    let url = std::env::var(LockClient::URL_ENV)?;
    let client = LockClient::connect(&url).await?;
    let stdin_closed = async {
        let _ = tokio::task::spawn_blocking(|| {
            std::io::copy(&mut std::io::stdin(), &mut std::io::sink())
        })
        .await;
    };
    if let Some(leadership) = candidate(name, &client, stdin_closed).await? {
        leadership.resign().await?;
        println!("{name}: resigned");
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("candidate") {
        return candidate_process(&args[2]).await;
    }
    let url = std::env::var(LockClient::URL_ENV).unwrap_or_else(|_| "memory://".into());
    distlock::init(LockClient::connect(&url).await?)?;
    let client = distlock::client()?;
    let mut candidates = Candidates::start(&url)?;
    let result = elect(client, &mut candidates).await;
    candidates.stop()?;
    let (first, takeovers) = result?;
    // Everyone stepped down: nobody leads.
    let deadline = Instant::now() + LEASE * 3;
    while leader(client).await?.is_some() {
        if Instant::now() > deadline {
            return Err("the lock is still held after every candidate stopped".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "backend {}: {CANDIDATES} candidates; first leader after {first:?}; takeovers after \
         the leader was killed: {takeovers:?} (lease {LEASE:?})",
        client.backend_kind()
    );
    Ok(())
}

/// Elects a leader, kills it twice (each time a standby takes over, with a higher term); how
/// long the first election and each takeover took.
async fn elect(
    client: &LockClient,
    candidates: &mut Candidates,
) -> Result<(Duration, Vec<Duration>), BoxError> {
    let started = Instant::now();
    let (mut identity, mut term) = next_leader(client, 0, Duration::from_secs(20)).await?;
    let first = started.elapsed();
    let mut takeovers = Vec::new();
    for _ in 0..2 {
        let who: usize = identity
            .strip_prefix("candidate-")
            .and_then(|i| i.parse().ok())
            .ok_or_else(|| format!("the leader `{identity}` is no candidate"))?;
        println!("the store names {identity} leader (term {term}); killing it");
        candidates.kill(who)?;
        let killed = Instant::now();
        (identity, term) = next_leader(client, term, LEASE + Duration::from_secs(5)).await?;
        let took = killed.elapsed();
        println!("{identity} took over {took:?} after the kill (term {term})");
        takeovers.push(took);
    }
    Ok((first, takeovers))
}
