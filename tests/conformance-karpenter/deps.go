//go:build conformance

// Package conformance only pins, for `go mod tidy`, the packages Karpenter's three e2e suites import
// (test/suites/regression, disruption and dra), so that go.sum lists every module `go test -c` of each
// needs. It is never built (the build tag is never set).
package conformance

import (
	_ "github.com/awslabs/operatorpkg/object"
	_ "github.com/onsi/ginkgo/v2"
	_ "github.com/onsi/gomega"
	_ "github.com/samber/lo"
	_ "k8s.io/api/resource/v1"
	_ "k8s.io/api/scheduling/v1"
	_ "k8s.io/client-go/informers"
	_ "k8s.io/client-go/tools/cache"
	_ "k8s.io/utils/ptr"
	_ "sigs.k8s.io/controller-runtime/pkg/predicate"
	_ "sigs.k8s.io/karpenter/dra-kwok-driver/pkg/apis/v1alpha1"
	_ "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	_ "sigs.k8s.io/karpenter/pkg/apis/autoscaling/v1beta1"
	_ "sigs.k8s.io/karpenter/pkg/operator/options"
	_ "sigs.k8s.io/karpenter/pkg/test"
	_ "sigs.k8s.io/karpenter/pkg/test/expectations"
	_ "sigs.k8s.io/karpenter/pkg/utils/node"
	_ "sigs.k8s.io/karpenter/pkg/utils/resources"
	_ "sigs.k8s.io/karpenter/test/pkg/debug"
	_ "sigs.k8s.io/karpenter/test/pkg/environment/common"
	_ "sigs.k8s.io/yaml"
)
