package main

// kubelet: one node whose device-plugin side is the REAL upstream kubelet
// code. No kubelet can run in the test environment (no container runtime, no
// cgroups), so this runs, in-process, the parts of kubelet that a device
// plugin talks to:
//
//   - the device manager (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager):
//     the v1beta1 Registration server on <plugin-dir>/kubelet.sock, the
//     plugin clients (GetDevicePluginOptions, ListAndWatch,
//     GetPreferredAllocation, Allocate, PreStartContainer) and the checkpoint;
//   - the topology manager with kubelet's default policy "none"
//     (.../cm/topologymanager), which is kubelet's pod admit handler that calls
//     the device manager's Allocate for each container;
//   - the PodResources v1 (and v1alpha1) gRPC server
//     (.../pkg/kubelet/apis/podresources) with kubelet's rate limit.
//
// Around them it plays the rest of kubelet for the one node, like simnodes:
// Node object and status (device-plugin capacity from GetCapacity), pod
// admission one pod at a time, container start (GetDeviceRunContainerOptions,
// which issues PreStartContainer), pod status and deletion. Nothing runs in
// the pods; what the runtime would have been given for each container is
// written to --results-dir as JSON.
//
// See docs/design/0009-spike-control-plane-harness.md, "kubelet: the real
// device manager".

import (
	"context"
	"encoding/json"
	"errors"
	goflag "flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
	_ "unsafe" // go:linkname, see newDeviceManager

	cadvisorapi "github.com/google/cadvisor/info/v1"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	criutil "k8s.io/cri-client/pkg/util"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	podresourcesapiv1alpha1 "k8s.io/kubelet/pkg/apis/podresources/v1alpha1"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"
	apisgrpc "k8s.io/kubernetes/pkg/kubelet/apis/grpc"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

const (
	kubeletPodWorkers = 64 // kubelet runs one goroutine per pod; plenty for the tests
	kubeletHeartbeat  = 20 * time.Second
	// kubelet's pod worker retries a failed sync (e.g. CreateContainerConfigError)
	// after workerBackOffPeriod = 10 s.
	kubeletSyncBackoff = 10 * time.Second
	kubeletMaxRetries  = 15 // API write conflicts
	// kubelet's rejectPod prefixes the status message with this.
	podRejectedPrefix = "Pod was rejected: "
	// kubelet's event reason when a container's config cannot be generated
	// (events.FailedToCreateContainer) and the container waiting reason
	// (kubecontainer.ErrCreateContainerConfig).
	eventFailed                = "Failed"
	reasonCreateContainerError = "CreateContainerConfigError"
)

// newDeviceManager is devicemanager.newManagerImpl, the constructor behind the
// exported NewManagerImpl. NewManagerImpl hard-codes the socket path
// /var/lib/kubelet/device-plugins/kubelet.sock (pluginapi.KubeletSocket);
// newManagerImpl takes it as an argument (upstream's own tests use it that
// way). Everything else is identical: the registration server is created at
// socketPath and the checkpoint lives in its directory.
//
//go:linkname newDeviceManager k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func newDeviceManager(logger klog.Logger, socketPath string, topology []cadvisorapi.Node, topologyAffinityStore topologymanager.Store) (*devicemanager.ManagerImpl, error)

type kubeletConfig struct {
	kubeconfig         string
	node               string
	pluginDir          string
	podResourcesSocket string
	resultsDir         string
	readyFile          string
	cpu, memory        resource.Quantity
	maxPods            int
	statusInterval     time.Duration
	prQPS, prBurst     int
	verbosity          int
}

func parseKubeletFlags(args []string) (*kubeletConfig, error) {
	c := &kubeletConfig{}
	fs := goflag.NewFlagSet("kubelet", goflag.ContinueOnError)
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (required)")
	fs.StringVar(&c.node, "node", "", "node name (required); the Node is created if missing")
	fs.StringVar(&c.pluginDir, "plugin-dir", "", "device plugin directory (required): kubelet.sock and the device manager checkpoint live here, as in /var/lib/kubelet/device-plugins")
	fs.StringVar(&c.podResourcesSocket, "pod-resources-socket", "", "unix socket to serve the PodResources API on (required), as /var/lib/kubelet/pod-resources/kubelet.sock")
	fs.StringVar(&c.resultsDir, "results-dir", "", "directory for one <namespace>_<pod>_<container>.json per started or failed container (required)")
	fs.StringVar(&c.readyFile, "ready-file", "", "file written once the node, the device manager and the PodResources server are up")
	cpu := fs.String("cpu", "128", "node CPU capacity, a quantity")
	memory := fs.String("memory", "1Ti", "node memory capacity, a quantity in bytes")
	fs.IntVar(&c.maxPods, "max-pods", 250, "node pod capacity")
	fs.DurationVar(&c.statusInterval, "node-status-interval", time.Second, "how often the device manager's capacity is read and, when changed, written to the Node status")
	fs.IntVar(&c.prQPS, "pod-resources-qps", int(podresources.DefaultQPS), "PodResources API rate limit, requests per second (kubelet's default)")
	fs.IntVar(&c.prBurst, "pod-resources-burst", int(podresources.DefaultBurstTokens), "PodResources API rate limit burst (kubelet's default)")
	fs.IntVar(&c.verbosity, "v", 0, "klog verbosity of the upstream kubelet code (2 shows registrations and device updates, 4 every plugin call)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s kubelet --kubeconfig KC --node NAME --plugin-dir DIR --pod-resources-socket PATH --results-dir DIR [flags]\n\n"+
			"Runs the upstream kubelet device manager, topology manager (policy none) and PodResources\n"+
			"server for one node, and acts as that node's kubelet until SIGINT/SIGTERM.\n\n", self)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, errFlagsPrinted{err}
	}
	if fs.NArg() != 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, f := range []struct{ name, val, want string }{
		{"kubeconfig", c.kubeconfig, "the path of a kubeconfig"},
		{"node", c.node, "a node name"},
		{"plugin-dir", c.pluginDir, "a directory"},
		{"pod-resources-socket", c.podResourcesSocket, "a socket path"},
		{"results-dir", c.resultsDir, "a directory"},
	} {
		if f.val == "" {
			return nil, fmt.Errorf("--%s is required: %s", f.name, f.want)
		}
	}
	if errs := validation.IsDNS1123Subdomain(c.node); len(errs) != 0 {
		return nil, fmt.Errorf("--node %q: not a DNS-1123 subdomain: %s", c.node, strings.Join(errs, "; "))
	}
	var err error
	for _, p := range []*string{&c.pluginDir, &c.podResourcesSocket, &c.resultsDir} {
		if *p, err = filepath.Abs(*p); err != nil {
			return nil, err
		}
	}
	// sockaddr_un holds 107 bytes; kubelet.sock and the plugins' sockets live in plugin-dir.
	if n := len(filepath.Join(c.pluginDir, "kubelet.sock")); n > 100 {
		return nil, fmt.Errorf("--plugin-dir %q: too long for unix sockets in it (%d bytes; keep it under ~80)", c.pluginDir, n)
	}
	if n := len(c.podResourcesSocket); n > 107 {
		return nil, fmt.Errorf("--pod-resources-socket %q: too long for a unix socket (%d bytes > 107)", c.podResourcesSocket, n)
	}
	if c.cpu, err = resource.ParseQuantity(*cpu); err != nil || c.cpu.Sign() <= 0 {
		return nil, fmt.Errorf("--cpu %q: want a positive Kubernetes quantity, e.g. 128 or 7500m", *cpu)
	}
	if c.memory, err = resource.ParseQuantity(*memory); err != nil || c.memory.Sign() <= 0 {
		return nil, fmt.Errorf("--memory %q: want a positive Kubernetes quantity in bytes, e.g. 1Ti or 512Gi", *memory)
	}
	if c.maxPods < 1 {
		return nil, fmt.Errorf("--max-pods %d: want >= 1", c.maxPods)
	}
	if c.statusInterval < 10*time.Millisecond {
		return nil, fmt.Errorf("--node-status-interval %v: want >= 10ms", c.statusInterval)
	}
	if c.prQPS < 1 || c.prBurst < 1 {
		return nil, fmt.Errorf("--pod-resources-qps %d / --pod-resources-burst %d: want >= 1", c.prQPS, c.prBurst)
	}
	return c, nil
}

func runKubelet(args []string) int {
	c, err := parseKubeletFlags(args)
	if errors.Is(err, goflag.ErrHelp) {
		return 0
	}
	if err != nil {
		if !errors.As(err, new(errFlagsPrinted)) {
			fmt.Fprintf(os.Stderr, "%s: kubelet: %v\n", self, err)
		}
		return 2
	}
	var kfs goflag.FlagSet
	klog.InitFlags(&kfs)
	_ = kfs.Set("v", fmt.Sprint(c.verbosity))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	restCfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return fatalf("kubelet: --kubeconfig %s: %v", c.kubeconfig, err)
	}
	restCfg.QPS, restCfg.Burst = 500, 1000
	restCfg.UserAgent = "tessera-kubelet"
	restCfg.ContentType = "application/vnd.kubernetes.protobuf"
	restCfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fatalf("kubelet: %v", err)
	}
	err = runKubeletNode(ctx, c, client)
	klog.Flush()
	if err != nil {
		return fatalf("kubelet: %v", err)
	}
	return 0
}

// podState is what this kubelet knows of one pod (by UID) once admitted.
type podState struct {
	rejected   *lifecycle.PodAdmitResult // admission failed
	started    int                       // containers (init, then regular) through GetDeviceRunContainerOptions
	results    []containerResult
	statusDone bool // Running (or Failed) written
}

type kubeletNode struct {
	cfg      *kubeletConfig
	client   kubernetes.Interface
	recorder record.EventRecorder
	logger   klog.Logger
	pods     corelisters.PodLister
	synced   cache.InformerSynced
	dm       *devicemanager.ManagerImpl
	tm       topologymanager.Manager

	admitQ workqueue.TypedInterface[string]             // kubelet's sync loop: one pod at a time
	workQ  workqueue.TypedRateLimitingInterface[string] // kubelet's pod workers
	mu     sync.Mutex                                   // guards state
	state  map[types.UID]*podState
}

// runKubeletNode runs until ctx is done. c.kubeconfig is not used here.
func runKubeletNode(ctx context.Context, c *kubeletConfig, client kubernetes.Interface) error {
	logger := klog.Background().WithName("kubelet")
	for _, d := range []string{c.pluginDir, c.resultsDir, filepath.Dir(c.podResourcesSocket)} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	k := &kubeletNode{cfg: c, client: client, logger: logger, state: map[types.UID]*podState{}}

	// Kubelet's event recorder: core/v1 Events, source kubelet/<node>.
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	k.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: c.node})

	existed, err := k.ensureNode(ctx)
	if err != nil {
		return fmt.Errorf("node %s: %w", c.node, err)
	}

	// As in kubelet's container manager: topology manager first, then the
	// device manager as its hint provider and with it as the affinity store.
	// No cadvisor here: the machine is described as one NUMA node, id 0.
	// With policy "none" the topology manager neither reads it nor asks for
	// hints; the device manager only uses it for NUMA-aware allocation, which
	// a "none" policy never requests.
	topology := []cadvisorapi.Node{{Id: 0}}
	k.tm, err = topologymanager.NewManager(topology, topologymanager.PolicyNone, topologymanager.ContainerTopologyScope, nil)
	if err != nil {
		return fmt.Errorf("topology manager: %w", err)
	}
	k.dm, err = newDeviceManager(logger, filepath.Join(c.pluginDir, "kubelet.sock"), topology, k.tm)
	if err != nil {
		return fmt.Errorf("device manager: %w", err)
	}
	k.tm.AddHintProvider(logger, k.dm)
	// Kubelet, registering with an existing Node: a missing checkpoint means
	// the node was recreated, so every extended resource is zeroed until its
	// plugin reports it again (Kubelet.reconcileExtendedResource).
	if existed && k.dm.ShouldResetExtendedResourceCapacity() {
		if err := k.zeroExtendedResources(ctx); err != nil {
			return fmt.Errorf("node %s: zero extended resources: %w", c.node, err)
		}
	}

	// Pods bound to this node, as kubelet's API server config source watches them.
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", c.node).String()
	}))
	podInformer := factory.Core().V1().Pods()
	k.pods = podInformer.Lister()
	k.synced = podInformer.Informer().HasSynced
	k.admitQ = workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "kubelet-admit"})
	k.workQ = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "kubelet-pods"})
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    k.podChanged,
		UpdateFunc: func(_, obj any) { k.podChanged(obj) },
		DeleteFunc: k.podDeleted,
	}); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		// Stop taking work, cancel what is in flight (PreStartContainer,
		// the PodResources server), disconnect the plugins (an Allocate has
		// no deadline in kubelet), then wait for the workers.
		k.admitQ.ShutDown()
		k.workQ.ShutDown()
		cancel()
		if err := k.dm.Stop(logger); err != nil {
			logger.Error(err, "Stopping the device manager")
		}
		wg.Wait()
		factory.Shutdown()
		_ = os.Remove(c.podResourcesSocket)
		_ = os.Remove(filepath.Join(c.pluginDir, "kubelet.sock"))
		fmt.Fprintf(os.Stderr, "kubelet: node %s stopped\n", c.node)
	}()
	factory.Start(runCtx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("pod informer (%v) did not sync", typ)
		}
	}

	// The device manager: reads its checkpoint, removes every other socket in
	// plugin-dir (plugins must notice and re-register), serves kubelet.sock.
	// Its sources are ready once the informer has synced, as kubelet's are
	// once the API server source has delivered its first list; that is before
	// this point, so the empty initial container map (kubelet's view of
	// containers already running at start-up) is never consulted.
	if err := k.dm.Start(logger, k.activePods, sourcesReadyFunc(k.synced), containermap.NewContainerMap(), sets.New[string]()); err != nil {
		return fmt.Errorf("device manager: %w", err)
	}
	wg.Add(1)
	go func() { // kubelet's sync loop consumes the manager's device health updates
		defer wg.Done()
		for {
			select {
			case <-runCtx.Done():
				return
			case u := <-k.dm.Updates():
				logger.V(2).Info("Device health changed", "pods", u.PodUIDs)
			}
		}
	}()

	// The PodResources server, as kubelet's ListenAndServePodResources builds it.
	if err := k.servePodResources(runCtx, &wg); err != nil {
		return fmt.Errorf("--pod-resources-socket: %w", err)
	}

	wg.Add(1 + kubeletPodWorkers)
	go func() {
		defer wg.Done()
		for k.admitNext() {
		}
	}()
	for i := 0; i < kubeletPodWorkers; i++ {
		go func() {
			defer wg.Done()
			for k.processNext(runCtx) {
			}
		}()
	}

	if c.readyFile != "" {
		if err := writeFileAtomic(c.readyFile, []byte(c.node+"\n")); err != nil {
			return fmt.Errorf("--ready-file: %w", err)
		}
	}
	fmt.Fprintf(os.Stderr, "kubelet: node %s: device plugins register at %s; PodResources at %s\n",
		c.node, filepath.Join(c.pluginDir, "kubelet.sock"), c.podResourcesSocket)
	fmt.Printf("kubelet: ready node %s\n", c.node)

	ticker := time.NewTicker(c.statusInterval)
	defer ticker.Stop()
	var last, lastAlloc corev1.ResourceList // device-plugin capacity/allocatable last written
	zeroed := sets.New[string]()            // removed resources not yet written as 0
	lastBeat := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		capacity, allocatable, removed := k.dm.GetCapacity()
		zeroed.Insert(removed...)
		for r := range capacity {
			zeroed.Delete(string(r))
		}
		beat := time.Since(lastBeat) >= kubeletHeartbeat
		if !beat && zeroed.Len() == 0 && reflect.DeepEqual(resourceValues(capacity), resourceValues(last)) &&
			reflect.DeepEqual(resourceValues(allocatable), resourceValues(lastAlloc)) {
			continue
		}
		mode := statusDevices
		if beat {
			mode = statusBeat
		}
		if err := k.patchNodeStatus(ctx, capacity, allocatable, zeroed, mode); err != nil {
			if ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "kubelet: node %s status: %v\n", c.node, err)
			}
			continue
		}
		if beat {
			lastBeat = time.Now()
		}
		last, lastAlloc = capacity, allocatable
		zeroed.Clear()
	}
}

type sourcesReadyFunc func() bool

func (sourcesReadyFunc) AddSource(string) {}
func (f sourcesReadyFunc) AllReady() bool { return f() }

func resourceValues(l corev1.ResourceList) map[corev1.ResourceName]int64 {
	m := make(map[corev1.ResourceName]int64, len(l))
	for k, v := range l {
		m[k] = v.Value()
	}
	return m
}

// --- node ----------------------------------------------------------------

func (k *kubeletNode) nodeConditions() []corev1.NodeCondition {
	now := metav1.Now()
	cond := func(t corev1.NodeConditionType, st corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: st, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return []corev1.NodeCondition{
		cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
		cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
		cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
		cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet (tessera-testcluster kubelet, real device manager) is posting ready status"),
	}
}

// baseResources is the node's own capacity (no GPUs: tessera-node and the
// device plugin publish those).
func (k *kubeletNode) baseResources() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:              k.cfg.cpu,
		corev1.ResourceMemory:           k.cfg.memory,
		corev1.ResourcePods:             *resource.NewQuantity(int64(k.cfg.maxPods), resource.DecimalSI),
		corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
	}
}

func (k *kubeletNode) applyMeta(node *corev1.Node) (changed bool) {
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	for key, v := range map[string]string{
		"kubernetes.io/hostname": node.Name, "kubernetes.io/os": "linux", "kubernetes.io/arch": runtime.GOARCH,
	} {
		if node.Labels[key] != v {
			node.Labels[key], changed = v, true
		}
	}
	taints := node.Spec.Taints[:0:0]
	for _, t := range node.Spec.Taints {
		if t.Key == notReadyTaint { // normally removed by the node lifecycle controller
			changed = true
			continue
		}
		taints = append(taints, t)
	}
	node.Spec.Taints = taints
	return changed
}

// ensureNode creates the Node if missing (reporting whether it existed),
// fixes its labels/taints, and writes its own status (patchNodeStatus).
func (k *kubeletNode) ensureNode(ctx context.Context) (existed bool, err error) {
	nodes := k.client.CoreV1().Nodes()
	retriable := func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }
	err = retry.OnError(retry.DefaultBackoff, retriable, func() error {
		node, err := nodes.Get(ctx, k.cfg.node, metav1.GetOptions{})
		existed = err == nil
		if apierrors.IsNotFound(err) {
			fresh := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.cfg.node}}
			k.applyMeta(fresh)
			node, err = nodes.Create(ctx, fresh, metav1.CreateOptions{})
		}
		if err != nil {
			return err
		}
		if k.applyMeta(node) {
			_, err = nodes.Update(ctx, node, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		return existed, err
	}
	return existed, k.patchNodeStatus(ctx, nil, nil, nil, statusFull)
}

// patchNodeStatus writes, as kubelet's MachineInfo setter does, the device
// manager's capacity and allocatable for each registered resource and 0 for
// each removed one (kubelet keeps a removed resource at 0 rather than
// deleting it). It is a strategic-merge patch of the status subresource, so
// capacity that others (tessera-node) publish is left alone. mode
// statusFull (start-up) also writes the node's own resources, conditions,
// addresses and node info; statusBeat refreshes only the conditions'
// lastHeartbeatTime, so a condition that a test set itself keeps its status.
func (k *kubeletNode) patchNodeStatus(ctx context.Context, capacity, allocatable corev1.ResourceList, removed sets.Set[string], mode statusMode) error {
	capPatch, allocPatch := map[string]string{}, map[string]string{}
	status := map[string]any{}
	switch mode {
	case statusFull:
		for r, q := range k.baseResources() {
			capPatch[string(r)], allocPatch[string(r)] = q.String(), q.String()
		}
		status["conditions"] = k.nodeConditions()
		status["phase"] = corev1.NodeRunning
		status["addresses"] = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: k.cfg.node}}
		status["nodeInfo"] = corev1.NodeSystemInfo{
			MachineID: "tessera-kubelet-" + k.cfg.node, SystemUUID: "tessera-kubelet-" + k.cfg.node, BootID: "tessera-kubelet",
			KernelVersion: runtime.GOOS, OSImage: "tessera-testcluster kubelet",
			ContainerRuntimeVersion: "tessera-kubelet://0", KubeletVersion: kubeletVersion(),
			OperatingSystem: "linux", Architecture: runtime.GOARCH,
		}
	case statusBeat:
		now := metav1.Now().Rfc3339Copy()
		var conds []map[string]any
		for _, t := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeReady} {
			conds = append(conds, map[string]any{"type": t, "lastHeartbeatTime": now})
		}
		status["conditions"] = conds
	}
	for r, q := range capacity {
		capPatch[string(r)] = q.String()
	}
	for r, q := range allocatable {
		allocPatch[string(r)] = q.String()
	}
	for r := range removed {
		if _, ok := capacity[corev1.ResourceName(r)]; !ok {
			capPatch[r], allocPatch[r] = "0", "0"
		}
	}
	if len(capPatch) > 0 {
		status["capacity"], status["allocatable"] = capPatch, allocPatch
	}
	if len(status) == 0 {
		return nil
	}
	data, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	_, err = k.client.CoreV1().Nodes().Patch(ctx, k.cfg.node, types.StrategicMergePatchType, data, metav1.PatchOptions{}, "status")
	return err
}

type statusMode int

const (
	statusDevices statusMode = iota // device-plugin resources only
	statusBeat
	statusFull
)

// zeroExtendedResources is Kubelet.reconcileExtendedResource for a node that
// exists while the device manager has no checkpoint (the node was recreated):
// every extended resource goes to 0 until its plugin reports it again.
func (k *kubeletNode) zeroExtendedResources(ctx context.Context) error {
	node, err := k.client.CoreV1().Nodes().Get(ctx, k.cfg.node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	zeroed := sets.New[string]()
	for r := range node.Status.Capacity {
		if v1helper.IsExtendedResourceName(r) {
			zeroed.Insert(string(r))
		}
	}
	if zeroed.Len() == 0 {
		return nil
	}
	fmt.Fprintf(os.Stderr, "kubelet: node %s exists but %s has no checkpoint: zeroing its extended resources %v, as kubelet does for a recreated node\n",
		k.cfg.node, k.cfg.pluginDir, sets.List(zeroed))
	return k.patchNodeStatus(ctx, nil, nil, zeroed, statusDevices)
}

// --- PodResources ----------------------------------------------------------

func (k *kubeletNode) servePodResources(ctx context.Context, wg *sync.WaitGroup) error {
	providers := podresources.PodResourcesProviders{
		Pods:             podResourcesPods{k},
		Devices:          podResourcesDevices{k.dm},
		Cpus:             noCPUs{},   // no CPU manager: kubelet's answer without one
		Memory:           noMemory{}, // no memory manager
		DynamicResources: noDRA{},    // no DRA manager
	}
	server := grpc.NewServer(apisgrpc.WithRateLimiter(ctx, "podresources", int32(k.cfg.prQPS), int32(k.cfg.prBurst)))
	podresourcesapiv1alpha1.RegisterPodResourcesListerServer(server, podresources.NewV1alpha1PodResourcesServer(providers))
	podresourcesapi.RegisterPodResourcesListerServer(server, podresources.NewV1PodResourcesServer(ctx, providers))
	// cri-client's CreateListener, as kubelet uses it: unlinks a stale socket,
	// creates the new one under a temporary name and renames it into place.
	l, err := criutil.CreateListener("unix://" + k.cfg.podResourcesSocket)
	if err != nil {
		return err
	}
	if ul, ok := l.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false) // it would unlink the temporary name; the socket is removed on exit
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := server.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			k.logger.Error(err, "PodResources server")
		}
	}()
	go func() {
		<-ctx.Done()
		server.Stop()
	}()
	return nil
}

// podResourcesPods is kubelet's pod manager as the PodResources server sees
// it: the pods bound to the node (the informer), GetActivePods as kubelet's.
type podResourcesPods struct{ k *kubeletNode }

func (p podResourcesPods) GetActivePods() []*corev1.Pod { return p.k.activePods() }
func (p podResourcesPods) GetPods() []*corev1.Pod       { return p.k.nodePods() }
func (p podResourcesPods) GetPodByName(namespace, name string) (*corev1.Pod, bool) {
	pod, err := p.k.pods.Pods(namespace).Get(name)
	if err != nil || pod.Spec.NodeName != p.k.cfg.node {
		return nil, false
	}
	return pod, true
}

// podResourcesDevices is kubelet's container manager as the DevicesProvider:
// the device manager's answers, converted as cm.containerDevicesFromResourceDeviceInstances does.
type podResourcesDevices struct{ dm *devicemanager.ManagerImpl }

func (d podResourcesDevices) UpdateAllocatedDevices() { d.dm.UpdateAllocatedDevices() }
func (d podResourcesDevices) GetDevices(podUID, containerName string) []*podresourcesapi.ContainerDevices {
	return containerDevicesFromResourceDeviceInstances(d.dm.GetDevices(podUID, containerName))
}
func (d podResourcesDevices) GetAllocatableDevices() []*podresourcesapi.ContainerDevices {
	return containerDevicesFromResourceDeviceInstances(d.dm.GetAllocatableDevices())
}

// containerDevicesFromResourceDeviceInstances is a copy of the unexported
// function of k8s.io/kubernetes/pkg/kubelet/cm (container_manager.go, v1.36.3).
func containerDevicesFromResourceDeviceInstances(devs devicemanager.ResourceDeviceInstances) []*podresourcesapi.ContainerDevices {
	var respDevs []*podresourcesapi.ContainerDevices
	for resourceName, resourceDevs := range devs {
		for devID, dev := range resourceDevs {
			topo := dev.GetTopology()
			if topo == nil {
				respDevs = append(respDevs, &podresourcesapi.ContainerDevices{
					ResourceName: resourceName,
					DeviceIds:    []string{devID},
				})
				continue
			}
			for _, node := range topo.GetNodes() {
				respDevs = append(respDevs, &podresourcesapi.ContainerDevices{
					ResourceName: resourceName,
					DeviceIds:    []string{devID},
					Topology:     &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: node.GetID()}}},
				})
			}
		}
	}
	return respDevs
}

type noCPUs struct{}

func (noCPUs) GetCPUs(string, string) []int64 { return []int64{} }
func (noCPUs) GetAllocatableCPUs() []int64    { return []int64{} }

type noMemory struct{}

func (noMemory) GetMemory(string, string) []*podresourcesapi.ContainerMemory { return nil }
func (noMemory) GetAllocatableMemory() []*podresourcesapi.ContainerMemory    { return nil }

type noDRA struct{}

func (noDRA) GetDynamicResources(*corev1.Pod, *corev1.Container) []*podresourcesapi.DynamicResource {
	return nil
}

// --- pods ------------------------------------------------------------------

// activePods is Kubelet.GetActivePods: the node's pods minus terminal ones
// (by API phase, or rejected here and not yet written back).
func (k *kubeletNode) activePods() []*corev1.Pod {
	all := k.nodePods()
	k.mu.Lock()
	defer k.mu.Unlock()
	active := make([]*corev1.Pod, 0, len(all))
	for _, p := range all {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if st := k.state[p.UID]; st != nil && st.rejected != nil {
			continue
		}
		active = append(active, p)
	}
	return active
}

// nodePods lists the pods bound to the node (the informer's field selector
// already says so; checked again for clients that ignore it).
func (k *kubeletNode) nodePods() []*corev1.Pod {
	all, _ := k.pods.List(labels.Everything())
	pods := make([]*corev1.Pod, 0, len(all))
	for _, p := range all {
		if p.Spec.NodeName == k.cfg.node {
			pods = append(pods, p)
		}
	}
	return pods
}

func (k *kubeletNode) podChanged(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName != k.cfg.node {
		return
	}
	key, err := cache.MetaNamespaceKeyFunc(p)
	if err != nil {
		return
	}
	switch {
	case p.DeletionTimestamp != nil:
		k.workQ.Add(key)
	case p.Status.Phase == corev1.PodPending || p.Status.Phase == "":
		// New to this kubelet: admit it. A known pod is in the pod workers'
		// queue until its status is written (our own status writes land here).
		k.mu.Lock()
		known := k.state[p.UID] != nil
		k.mu.Unlock()
		if !known {
			k.admitQ.Add(key)
		}
	}
}

func (k *kubeletNode) podDeleted(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		if tomb, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
			p, ok = tomb.Obj.(*corev1.Pod)
		}
	}
	if !ok {
		return
	}
	k.mu.Lock()
	delete(k.state, p.UID)
	k.mu.Unlock()
	// The pod is no longer active: the device manager frees its devices (and
	// checkpoints) the next time it looks; make that now.
	k.dm.UpdateAllocatedDevices()
}

// admitNext is kubelet's HandlePodAdditions for one pod: the allocate-
// resources admit handler (the topology manager, which calls the device
// manager's Allocate for init containers, then regular ones) runs on the one
// sync-loop goroutine, so Allocate calls never overlap.
func (k *kubeletNode) admitNext() bool {
	key, quit := k.admitQ.Get()
	if quit {
		return false
	}
	defer k.admitQ.Done(key)
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	pod, err := k.pods.Pods(ns).Get(name)
	if err != nil || pod.Spec.NodeName != k.cfg.node || pod.DeletionTimestamp != nil ||
		(pod.Status.Phase != corev1.PodPending && pod.Status.Phase != "") {
		// Gone, being deleted, or already past admission (a pod left Running
		// by an earlier run: kubelet restarted; its containers keep running
		// and their devices stay allocated from the checkpoint).
		return true
	}
	k.mu.Lock()
	known := k.state[pod.UID] != nil
	k.mu.Unlock()
	if known {
		return true
	}
	others := k.activePods()
	for i, p := range others {
		if p.UID == pod.UID {
			others = append(others[:i], others[i+1:]...)
			break
		}
	}
	result := k.tm.Admit(&lifecycle.PodAdmitAttributes{Pod: pod, OtherPods: others, Operation: lifecycle.AddOperation})
	st := &podState{}
	if !result.Admit {
		st.rejected = &result
		// Kubelet.rejectPod: a Warning event now, the status through the status manager.
		k.recorder.Eventf(pod, corev1.EventTypeWarning, result.Reason, "%s", result.Message)
		fmt.Fprintf(os.Stderr, "kubelet: pod %s rejected: %s: %s\n", key, result.Reason, result.Message)
		for _, c := range podContainers(pod) {
			r := k.containerResult(pod, c.Name, nil)
			r.Error, r.Stage = result.Message, "admission"
			k.writeResult(r)
		}
	}
	k.mu.Lock()
	k.state[pod.UID] = st
	k.mu.Unlock()
	if !result.Admit {
		// Devices allocated to earlier containers of the pod go back now
		// that it is inactive (kubelet frees them on the next Allocate).
		k.dm.UpdateAllocatedDevices()
	}
	k.workQ.Add(key)
	return true
}

func podContainers(p *corev1.Pod) []corev1.Container {
	return append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...)
}

func (k *kubeletNode) processNext(ctx context.Context) bool {
	key, quit := k.workQ.Get()
	if quit {
		return false
	}
	defer k.workQ.Done(key)
	err := k.syncPod(ctx, key)
	var later errRetryLater
	switch {
	case err == nil:
		k.workQ.Forget(key)
	case errors.As(err, &later):
		k.workQ.Forget(key)
		k.workQ.AddAfter(key, kubeletSyncBackoff)
	case k.workQ.NumRequeues(key) < kubeletMaxRetries:
		k.workQ.AddRateLimited(key)
	default:
		fmt.Fprintf(os.Stderr, "kubelet: pod %s: giving up: %v\n", key, err)
		k.workQ.Forget(key)
	}
	return true
}

type errRetryLater struct{ error }

// syncPod is kubelet's pod worker for one pod: finalize a deletion, write a
// rejection, or start the containers in order (GetDeviceRunContainerOptions,
// which calls PreStartContainer) and report the pod Running.
func (k *kubeletNode) syncPod(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := k.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pod.Spec.NodeName != k.cfg.node {
		return nil
	}
	if pod.DeletionTimestamp != nil {
		return finalizePodDeletion(ctx, k.client, pod)
	}
	k.mu.Lock()
	st := k.state[pod.UID]
	k.mu.Unlock()
	if st == nil || st.statusDone { // not admitted yet (admission requeues it), or done
		return nil
	}
	if st.rejected != nil {
		failed := pod.DeepCopy()
		failed.Status.Phase = corev1.PodFailed
		failed.Status.Reason = st.rejected.Reason
		failed.Status.Message = podRejectedPrefix + st.rejected.Message
		if err := k.updateStatus(ctx, failed); err != nil {
			return err
		}
		k.mu.Lock()
		st.statusDone = true
		k.mu.Unlock()
		return nil
	}

	containers := podContainers(pod)
	for st.started < len(containers) {
		c := &containers[st.started]
		opts, err := k.dm.GetDeviceRunContainerOptions(ctx, pod, c)
		r := k.containerResult(pod, c.Name, opts)
		if err != nil && ctx.Err() != nil {
			return nil // shutting down
		}
		if err != nil {
			// Kubelet: generateContainerConfig fails, a Warning event
			// "Failed" "Error: ...", the container waits with
			// CreateContainerConfigError, the pod stays Pending and the pod
			// worker retries the sync after its back-off.
			msg := err.Error()
			r.Error, r.Stage = msg, "prestart"
			k.writeResult(r)
			k.recorder.Eventf(pod, corev1.EventTypeWarning, eventFailed, "Error: %s", msg)
			fmt.Fprintf(os.Stderr, "kubelet: pod %s container %s: %v (retrying in %v)\n", key, c.Name, err, kubeletSyncBackoff)
			waiting := pod.DeepCopy()
			setContainerWaiting(waiting, c.Name, reasonCreateContainerError, msg)
			if err := k.updateStatus(ctx, waiting); err != nil && !apierrors.IsConflict(err) {
				k.logger.Error(err, "Writing pod status", "pod", key)
			}
			return errRetryLater{err}
		}
		st.results = append(st.results, r)
		st.started++
	}
	for _, r := range st.results {
		k.writeResult(r)
	}
	running := pod.DeepCopy()
	setPodRunning(running)
	if err := k.updateStatus(ctx, running); err != nil {
		return err
	}
	k.mu.Lock()
	st.statusDone = true
	k.mu.Unlock()
	return nil
}

func (k *kubeletNode) updateStatus(ctx context.Context, p *corev1.Pod) error {
	_, err := k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err // a conflict retries with the newer copy from the cache
}

func setContainerWaiting(p *corev1.Pod, name, reason, msg string) {
	set := func(sts *[]corev1.ContainerStatus, cs []corev1.Container) {
		for _, c := range cs {
			if c.Name != name {
				continue
			}
			w := corev1.ContainerStatus{Name: c.Name, Image: c.Image,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
			for i := range *sts {
				if (*sts)[i].Name == name {
					(*sts)[i] = w
					return
				}
			}
			*sts = append(*sts, w)
		}
	}
	set(&p.Status.InitContainerStatuses, p.Spec.InitContainers)
	set(&p.Status.ContainerStatuses, p.Spec.Containers)
}

// --- results -----------------------------------------------------------------

type mountResult struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	ReadOnly      bool   `json:"readOnly"`
}

type deviceNodeResult struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	Permissions   string `json:"permissions"`
}

// containerResult is what the container runtime would have been given for
// one container (kubelet's DeviceRunContainerOptions) and the devices the
// device manager holds for it.
type containerResult struct {
	Pod         string              `json:"pod"`
	Namespace   string              `json:"namespace"`
	UID         string              `json:"uid"`
	Container   string              `json:"container"`
	Devices     map[string][]string `json:"devices"`
	Mounts      []mountResult       `json:"mounts"`
	DeviceNodes []deviceNodeResult  `json:"deviceNodes"`
	Envs        map[string]string   `json:"envs"`
	CDIDevices  []string            `json:"cdiDevices"`
	Annotations map[string]string   `json:"annotations"`
	Error       string              `json:"error,omitempty"`
	Stage       string              `json:"stage,omitempty"` // "admission" (Allocate) or "prestart" (PreStartContainer)
}

func (k *kubeletNode) containerResult(pod *corev1.Pod, container string, opts *devicemanager.DeviceRunContainerOptions) containerResult {
	r := containerResult{
		Pod: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID), Container: container,
		Devices: map[string][]string{}, Mounts: []mountResult{}, DeviceNodes: []deviceNodeResult{},
		Envs: map[string]string{}, CDIDevices: []string{}, Annotations: map[string]string{},
	}
	for res, devs := range k.dm.GetDevices(string(pod.UID), container) {
		ids := make([]string, 0, len(devs))
		for id := range devs {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		r.Devices[res] = ids
	}
	if opts == nil {
		return r
	}
	for _, m := range opts.Mounts {
		r.Mounts = append(r.Mounts, mountResult{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	for _, d := range opts.Devices {
		r.DeviceNodes = append(r.DeviceNodes, deviceNodeResult{ContainerPath: d.PathInContainer, HostPath: d.PathOnHost, Permissions: d.Permissions})
	}
	for _, e := range opts.Envs {
		r.Envs[e.Name] = e.Value
	}
	for _, d := range opts.CDIDevices {
		r.CDIDevices = append(r.CDIDevices, d.Name)
	}
	for _, a := range opts.Annotations {
		r.Annotations[a.Name] = a.Value
	}
	return r
}

func (k *kubeletNode) writeResult(r containerResult) {
	data, err := json.MarshalIndent(r, "", "  ")
	if err == nil {
		path := filepath.Join(k.cfg.resultsDir, r.Namespace+"_"+r.Pod+"_"+r.Container+".json")
		err = writeFileAtomic(path, append(data, '\n'))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubelet: results for %s/%s %s: %v\n", r.Namespace, r.Pod, r.Container, err)
	}
}
