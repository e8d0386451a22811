//! Nothing here: the cases are in `tests/ui/`, run by `tests/ui.rs`.
