// Package kinde is a fake Kinde business for billsync's tests, demo and
// bench. It speaks Kinde's wire protocol, so billsync's real client and
// verifier run against it unchanged:
//
//   - keys.go: the webhook signing key set, served as JWKS
//     (/.well-known/jwks.json), that rotates as during a real rotation;
//   - token.go: the OAuth client-credentials grant for an M2M application
//     (/oauth2/token) and the bearer check every API request passes;
//   - billing.go: the billing part of the Management API (agreements and
//     entitlements, paged as Kinde pages) over the agreements it holds;
//   - users.go: the users (GET /api/v1/users, with expand=billing each
//     user's billing customer) and organisations (GET /api/v1/organizations,
//     GET /api/v1/organization?code=…&expand=billing) it holds, paged by
//     next_token as Kinde pages them; a customer given agreements without a
//     user or organisation gets a user of its own, so the lists find every
//     customer, as Kinde's do;
//   - webhook.go: signed JWT webhooks to the registered endpoints, retried
//     on Kinde's schedule, with copies, drops and reordering;
//   - control.go: the control API under /_mock/ (set agreements, add users
//     and organisations, register endpoints, send events, set faults, rotate
//     keys), the same verbs as the Server's Go methods.
//
// It misbehaves with package fault's Faults, which mean the same as for
// the fake Stripe: the webhook faults through the one delivery engine they
// share (fault.Deliverer), the request faults (5xx, 429 with
// RateLimit-Reset, latency, a request rate) on the token and API
// endpoints, and StaleReads on the billing API's reads. It ignores
// TargetKey: it has one client.
//
// It is the workshop's: it must never be wired into billsync's product
// path.
package kinde
