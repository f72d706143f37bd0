//! Scaling out: broadcast, topics and calls to a peer by address across server nodes,
//! over a shared bus (a [`Backplane`]).

mod backplane;

pub use backplane::{Backplane, BackplaneError, BoxFuture, BusEvent};
