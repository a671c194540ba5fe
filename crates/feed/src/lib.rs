//! The core, transport-free and storage-free: node names and views, position specs, T+O+C
//! cursors, paging, the intents that stamp and store items, the policy that decides who may
//! do what, and the service that serves every face. It knows nothing of HTTP, SQL or the
//! XMPP transport (its `Cargo.toml` names none of them, so the compiler keeps it so): faces
//! hand it plain values, and it reaches storage only through the traits it owns
//! ([`ports`]).
//!
//! - [`node`], [`position`], [`cursor`], [`paging`]: node names as views, position specs,
//!   T+O+C cursors, and pages cut from a view.
//! - [`item`], [`change`], [`outbox`]: items, the changes a commit emits, WebSub's outbox rows;
//!   [`receipt`]: the pusher's queue, whose receipts say when pushes were written.
//! - [`intents`]: publish, update and retract as the store's writes, stamped.
//! - [`policy`]: the configuration's rules and the one `Policy::may`; [`admission`], the
//!   per-sender request rate both faces admit requests by.
//! - [`atom`]: an Atom entry as both faces take it (checked, fields the core filters on).
//! - [`ports`]: the traits stores implement; [`service`]: what every face calls.
//! - [`error`]: the closed set of outcomes, named after XEP-0060's conditions.
//! - [`caches`]: what a face makes of an item version, made once, and answers kept by
//!   generation; [`generations`]: each feed's change generation, which validates a face's
//!   kept answers.

pub mod admission;
pub mod atom;
pub mod caches;
pub mod change;
pub mod cursor;
pub mod error;
pub mod generations;
pub mod intents;
pub mod item;
pub mod node;
pub mod outbox;
pub mod paging;
pub mod policy;
pub mod ports;
pub mod position;
pub mod receipt;
pub mod service;

pub use change::{Change, ViewChange};
pub use cursor::Cursor;
pub use error::FeedError;
pub use item::{Dates, Entry, Item, Key, Payload};
pub use node::{Filter, NodeName, Order, OrderBy, View};
pub use policy::{Action, Policy};
pub use ports::{ReadTx, Store, StoreError, WriteTx};
pub use position::Position;
pub use receipt::{Receipt, ToPush};
