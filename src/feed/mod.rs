//! The feed core, transport-free: node names and views, position specs, T+O+C cursors,
//! paging, publishing, subscriptions and authorisation. It knows nothing of XML or SQL:
//! the XMPP glue hands it plain values, and it reaches storage only through
//! [`crate::store::Store`].

pub mod change;
pub mod cursor;
pub mod error;
pub mod item;
pub mod node;
pub mod page;
pub mod position;
pub mod service;

pub use change::{Change, ViewChange};
pub use cursor::Cursor;
pub use error::FeedError;
pub use item::{Entry, Item, Key, Payload};
pub use node::{Filter, NodeName, Order, OrderBy, View};
pub use position::Position;
