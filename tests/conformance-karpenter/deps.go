//go:build conformance

// Package conformance only pins, for `go mod tidy`, the packages Karpenter's regression suite imports,
// so that go.sum lists every module `go test -c sigs.k8s.io/karpenter/test/suites/regression` needs.
// It is never built (the build tag is never set).
package conformance

import (
	_ "github.com/onsi/ginkgo/v2"
	_ "github.com/onsi/gomega"
	_ "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	_ "sigs.k8s.io/karpenter/pkg/test"
	_ "sigs.k8s.io/karpenter/test/pkg/debug"
	_ "sigs.k8s.io/karpenter/test/pkg/environment/common"
)
