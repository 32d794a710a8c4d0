//go:build release

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
)

// The release build (-tags release: the image, Dockerfile.release, the
// deploy docs) leaves the workshop out: the demo, the fake providers and
// the bench, with the harness and the scratch databases they need. Their
// commands stay listed and say where they are.

func runDemo(context.Context, []string, io.Writer, *slog.Logger) error  { return notInBuild("demo") }
func runMock(context.Context, []string, io.Writer, *slog.Logger) error  { return notInBuild("mock") }
func runBench(context.Context, []string, io.Writer, *slog.Logger) error { return notInBuild("bench") }

func notInBuild(name string) error {
	return fmt.Errorf("not in this build: %s is part of the workshop (fake providers, scratch databases), which the release build (-tags release) leaves out; run it from a checkout: go run ./cmd/billsync %s", name, name)
}
