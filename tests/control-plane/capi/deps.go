//go:build capi

// Package capi only pins, for `go mod tidy`, Cluster API's core controller manager, so that go.sum lists every
// module `go build sigs.k8s.io/cluster-api/core` needs. It is never built (the build tag is never set).
package capi

import (
	_ "sigs.k8s.io/cluster-api/core"
)
