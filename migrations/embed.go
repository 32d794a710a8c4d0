// Package migrations holds billsync's schema as numbered SQL files.
//
// Files are named NNN_name.sql and applied in order, each in its own
// transaction, by store.Migrate. A file, once released, is never edited: a
// change is a new file.
package migrations

import "embed"

// FS holds every migration file.
//
//go:embed *.sql
var FS embed.FS
