// Command dra-kwok-driver runs Karpenter's DRA KWOK driver (sigs.k8s.io/karpenter/dra-kwok-driver at the
// pinned version: it publishes the ResourceSlices its DRAConfig objects describe on kwok nodes) for
// Karpenter's DRA suite in `make conformance-karpenter`. Upstream's own main binds fixed ports (8082,
// 8083), and the harness runs one driver per control plane side by side, so this launcher takes them as
// flags, and it registers the list types upstream's scheme leaves out (without them the driver cannot
// list its DRAConfigs); the controller is upstream's, unchanged.
package main

import (
	"flag"
	"os"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"sigs.k8s.io/karpenter/dra-kwok-driver/pkg/apis/v1alpha1"
	"sigs.k8s.io/karpenter/dra-kwok-driver/pkg/controllers"
)

func main() {
	metrics := flag.String("metrics-bind-address", "0", "metrics address (0: off)")
	health := flag.String("health-probe-bind-address", "127.0.0.1:0", "health probe address")
	flag.Parse()
	ctrl.SetLogger(zap.New())
	log := ctrl.Log.WithName("dra-kwok-driver")

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(resourcev1.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	// Upstream's scheme registers the DRAConfig types without the group version's list and
	// option types, so listing DRAConfigs fails in the client ("v1.ListOptions is not suitable
	// for converting to test.karpenter.sh/v1alpha1") and the driver never publishes a slice.
	// controller-gen's generated registration adds them; so does this.
	metav1.AddToGroupVersion(scheme, v1alpha1.GroupVersion)
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: *metrics},
		HealthProbeBindAddress: *health,
	})
	if err != nil {
		log.Error(err, "unable to start the manager")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "unable to add the ready check")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := controllers.NewResourceSliceController(mgr.GetClient()).Register(ctx, mgr); err != nil {
		log.Error(err, "unable to register the ResourceSlice controller")
		os.Exit(1)
	}
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "the manager stopped")
		os.Exit(1)
	}
}
