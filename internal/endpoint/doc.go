// Package endpoint holds the plain value types that describe an engine endpoint: its identity,
// address, served base model, engine type, readiness, loaded adapters and the latest engine
// metrics snapshot.
//
// The package owns only data shapes and small pure methods on them. It does not watch
// Kubernetes, scrape metrics, track requests or pick endpoints; the cache and routing
// packages do that and both import this package, so neither imports the other for these
// types.
//
// Values are immutable once published: a producer builds a fresh value, never edits one
// it has handed out, and consumers treat every map and slice they receive as read-only.
package endpoint
