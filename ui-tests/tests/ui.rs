//! Compile-time behaviour of `#[distributed_lock]`: every supported function shape compiles
//! and runs (`tests/ui/pass`); every mistake fails with the message next to it
//! (`tests/ui/fail/*.stderr`). Regenerate the messages with `TRYBUILD=overwrite` and read
//! the diff.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
