//! Shared helpers for the whole-model tests.
