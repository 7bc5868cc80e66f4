// Karpenter's test/suites/dra is built in this directory: run.sh's `go test -overlay` puts the
// suite's files here, unchanged from the module cache, beside this one, which is all we add. The
// suite registers the DRAConfig types in client-go's scheme with the driver's hand-written
// SchemeBuilder, which leaves out metav1.AddToGroupVersion, so every create, list and delete of a
// DRAConfig fails in the client before any request ("v1.CreateOptions is not suitable for
// converting to test.karpenter.sh/v1alpha1"), whichever controller runs. controller-gen's
// generated registration adds the option types; so does this. The DRA KWOK driver's launcher
// (../dra-kwok-driver/main.go) fixes the same gap for the driver.
package dra_test

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"

	drav1alpha1 "sigs.k8s.io/karpenter/dra-kwok-driver/pkg/apis/v1alpha1"
)

func init() {
	metav1.AddToGroupVersion(scheme.Scheme, drav1alpha1.GroupVersion)
}
