//! Runs the examples the way a user would and checks what they print.

mod support;

use std::path::PathBuf;
use std::process::Command;

use support::RedisServer;

/// `target/<profile>/examples/<name>`, built by `cargo test` alongside this test.
fn example(name: &str) -> Command {
    let mut dir = std::env::current_exe().expect("test binary path");
    dir.pop(); // the test binary
    if dir.ends_with("deps") {
        dir.pop();
    }
    let path: PathBuf = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "example {name} is not built at {}: run `cargo test` (it builds the examples)",
        path.display()
    );
    let mut command = Command::new(path);
    command.env_remove(distlock::URL_ENV);
    command
}

fn run(mut command: Command) -> String {
    let output = command.output().expect("example runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "example failed: {stdout}\n{stderr}"
    );
    stdout
}

#[test]
fn orders_runs_on_memory_without_a_server() {
    let out = run(example("orders"));
    assert!(
        out.contains("using the embedded memory:// backend"),
        "{out}"
    );
    assert!(
        out.contains("200 order ids") && out.contains("every id unique"),
        "{out}"
    );
}

#[test]
fn orders_runs_on_redis_in_tasks_and_in_separate_processes() {
    let server = RedisServer::start();
    let mut tasks = example("orders");
    tasks.env(distlock::URL_ENV, server.url());
    let out = run(tasks);
    assert!(
        out.contains("backend redis") && out.contains("every id unique"),
        "{out}"
    );

    let mut processes = example("orders");
    processes
        .env(distlock::URL_ENV, server.url())
        .args(["--processes", "3"]);
    let out = run(processes);
    assert!(
        out.contains("3 processes") && out.contains("600 order ids"),
        "{out}"
    );
}

#[test]
fn orders_refuses_processes_on_memory_with_a_hint() {
    let mut command = example("orders");
    command.args(["--processes", "2"]);
    let output = command.output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("DISTLOCK_URL=redis://"), "{stderr}");
}
