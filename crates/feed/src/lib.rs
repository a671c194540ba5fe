//! The core, transport-free and storage-free: node names and views, position specs, T+O+C
//! cursors, paging, the intents that stamp and store items, the policy that decides who may
//! do what, and the service that serves every face. It knows nothing of XML, HTTP or SQL:
//! faces hand it plain values, and it reaches storage only through the traits it owns
//! ([`ports`]).

pub mod admission;
pub mod atom;
pub mod change;
pub mod cursor;
pub mod error;
pub mod intents;
pub mod item;
pub mod node;
pub mod outbox;
pub mod paging;
pub mod policy;
pub mod ports;
pub mod position;
pub mod service;

pub use change::{Change, ViewChange};
pub use cursor::Cursor;
pub use error::FeedError;
pub use item::{Entry, Item, Key, Payload};
pub use node::{Filter, NodeName, Order, OrderBy, View};
pub use policy::{Action, Policy};
pub use ports::{ReadTx, Store, StoreError, WriteTx};
pub use position::Position;
