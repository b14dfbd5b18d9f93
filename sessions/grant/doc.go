// Package grant decides what a caller may see, once per request and once
// per session: it reads a request's selection (profile, narrowing and
// bearer token), checks the token (a static token or an OAuth access token),
// and resolves the selection to a Binding, the grant a session is bound
// with: who is calling, the profile, its one shared compiled filter and its
// rate. A config reload re-derives a live session's grant from its own token
// and selection (Resolver.Regrant), and can only narrow it or refuse it.
//
// The package knows nothing of sessions, doors or wires; sessions imports
// it.
package grant
