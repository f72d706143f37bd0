//! Nothing to use here: this crate holds the tests and the benchmark of `jsonrpc-peer`
//! that need heavy dependencies (jsonrpsee, proptest, rcgen, hdrhistogram), so that the
//! root package's examples build without them.
