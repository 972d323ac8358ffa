//! The coding agent in the browser. The agent core (`lilypad-agent`) runs unchanged in wasm;
//! this crate adds what a page needs: a [`Workspace`] (the imported project in memory, shared
//! with the page's editor, FrogNano's tools and the virtual shell) and the wasm-bindgen API
//! (`web/src/agent/`) in which Python (Pyodide) and the language model (the browser engine's
//! chat sessions, or a scripted model) are JS objects the agent calls.
//!
//! It depends on the agent only, never on the engine: the model is whatever JS passes in.

pub mod events;
pub mod workspace;

#[cfg(target_arch = "wasm32")]
mod bindings;

pub use events::PageEvent;
pub use workspace::{SharedRepo, Workspace, WorkspaceError, agent_config};
