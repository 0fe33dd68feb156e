package main

// simnodes: simulated GPU nodes. No kubelet or container runtime can run in
// the test environment, so this stands in for both on N Node objects: it
// registers the Nodes with tessera's extended resources and GPU inventory
// annotation (docs/design/0002-contracts-v1.md, sections 5 and 8), and then
// plays their kubelet for the pod lifecycle: a bound pod goes Running at once,
// and a deleted pod is finalized at once. Nothing is executed.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
)

// Names from the contracts (include/tessera/names.h).
const (
	resGPU          corev1.ResourceName = "tessera.dev/gpu"
	resGPUMemory    corev1.ResourceName = "tessera.dev/gpu-memory"
	resGPUCores     corev1.ResourceName = "tessera.dev/gpu-cores"
	resGPUSlot      corev1.ResourceName = "tessera.dev/gpu-slot"
	annInventory                        = "tessera.dev/gpu-inventory"
	inventoryAPIVer                     = "tessera.dev/inventory/v1"
	labelSimulated                      = "tessera.dev/simulated"
	notReadyTaint                       = "node.kubernetes.io/not-ready"
	simWorkers                          = 8
	simHeartbeat                        = 20 * time.Second
	simMaxRetries                       = 15
)

type simConfig struct {
	kubeconfig   string
	prefix       string
	nodes, start int
	gpus         int
	gpuMemory    int64 // bytes per GPU
	gpuMemFormat resource.Format
	gpuModel     string
	smCount      int
	cpu, memory  resource.Quantity
	maxPods      int
	slots        int
	readyFile    string
	deleteOnExit bool
}

func (c *simConfig) nodeNames() []string {
	names := make([]string, 0, c.nodes)
	for i := c.start; i < c.start+c.nodes; i++ {
		names = append(names, fmt.Sprintf("%s%03d", c.prefix, i))
	}
	return names
}

type errFlagsPrinted struct{ error }

func (e errFlagsPrinted) Unwrap() error { return e.error }

// parseSimnodesFlags returns the configuration, or an error naming the flag
// and the accepted form (exit status 2).
func parseSimnodesFlags(args []string) (*simConfig, error) {
	c := &simConfig{}
	fs := flag.NewFlagSet("simnodes", flag.ContinueOnError)
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (required)")
	fs.IntVar(&c.nodes, "nodes", 0, "number of nodes (required, >= 1)")
	fs.StringVar(&c.prefix, "prefix", "gpu-node-", "node name prefix; names are <prefix><index as %03d>")
	fs.IntVar(&c.start, "start", 0, "first node index")
	fs.IntVar(&c.gpus, "gpus-per-node", 8, "GPUs per node (0-64)")
	gpuMemory := fs.String("gpu-memory", "16Gi", "memory of one GPU, a quantity in bytes")
	fs.StringVar(&c.gpuModel, "gpu-model", "NVIDIA H200", "GPU model name in the inventory")
	fs.IntVar(&c.smCount, "sm-count", 132, "SMs per GPU in the inventory")
	cpu := fs.String("cpu", "128", "node CPU capacity, a quantity")
	memory := fs.String("memory", "1Ti", "node memory capacity, a quantity in bytes")
	fs.IntVar(&c.maxPods, "max-pods", 250, "node pod capacity")
	fs.IntVar(&c.slots, "slots-per-gpu", 32, "tessera.dev/gpu-slot per GPU (1-100)")
	fs.StringVar(&c.readyFile, "ready-file", "", "file written once all nodes exist")
	fs.BoolVar(&c.deleteOnExit, "delete-on-exit", false, "on SIGINT/SIGTERM delete the nodes (and the pods bound to them)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s simnodes --kubeconfig KC --nodes N [flags]\n\n"+
			"Registers N simulated GPU nodes and acts as their kubelet until SIGINT/SIGTERM.\n\n", self)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, errFlagsPrinted{err} // the flag package has printed it
	}
	if fs.NArg() != 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if c.kubeconfig == "" {
		return nil, errors.New("--kubeconfig is required: the path of a kubeconfig")
	}
	if c.nodes < 1 {
		return nil, fmt.Errorf("--nodes %d: want a count >= 1", c.nodes)
	}
	if c.start < 0 {
		return nil, fmt.Errorf("--start %d: want an index >= 0", c.start)
	}
	if c.gpus < 0 || c.gpus > 64 {
		return nil, fmt.Errorf("--gpus-per-node %d: want 0-64", c.gpus)
	}
	if c.smCount < 1 {
		return nil, fmt.Errorf("--sm-count %d: want >= 1", c.smCount)
	}
	if c.maxPods < 1 {
		return nil, fmt.Errorf("--max-pods %d: want >= 1", c.maxPods)
	}
	if c.slots < 1 || c.slots > 100 {
		return nil, fmt.Errorf("--slots-per-gpu %d: want 1-100 (device IDs are <uuid>-s00..s99)", c.slots)
	}
	if strings.TrimSpace(c.gpuModel) == "" {
		return nil, errors.New("--gpu-model: want a non-empty model name, e.g. \"NVIDIA H200\"")
	}
	q, err := resource.ParseQuantity(*gpuMemory)
	if err != nil || q.Sign() <= 0 {
		return nil, fmt.Errorf("--gpu-memory %q: want a positive Kubernetes quantity in bytes, e.g. 16Gi or 141G", *gpuMemory)
	}
	b, ok := q.AsInt64()
	if !ok {
		return nil, fmt.Errorf("--gpu-memory %q: want a whole number of bytes, e.g. 16Gi or 141G", *gpuMemory)
	}
	if b > math.MaxInt64/64 {
		return nil, fmt.Errorf("--gpu-memory %q: too large", *gpuMemory)
	}
	c.gpuMemory, c.gpuMemFormat = b, q.Format
	if c.cpu, err = resource.ParseQuantity(*cpu); err != nil || c.cpu.Sign() <= 0 {
		return nil, fmt.Errorf("--cpu %q: want a positive Kubernetes quantity, e.g. 128 or 7500m", *cpu)
	}
	if c.memory, err = resource.ParseQuantity(*memory); err != nil || c.memory.Sign() <= 0 {
		return nil, fmt.Errorf("--memory %q: want a positive Kubernetes quantity in bytes, e.g. 1Ti or 512Gi", *memory)
	}
	names := c.nodeNames()
	for _, n := range []string{names[0], names[len(names)-1]} {
		if errs := validation.IsDNS1123Subdomain(n); len(errs) != 0 {
			return nil, fmt.Errorf("--prefix %q: node name %q is not a DNS-1123 subdomain (lower case alphanumerics, '-' and '.'): %s",
				c.prefix, n, strings.Join(errs, "; "))
		}
	}
	return c, nil
}

func runSimnodes(args []string) int {
	c, err := parseSimnodesFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		if !errors.As(err, new(errFlagsPrinted)) {
			fmt.Fprintf(os.Stderr, "%s: simnodes: %v\n", self, err)
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := simnodes(ctx, c); err != nil {
		return fatalf("simnodes: %v", err)
	}
	return 0
}

type sim struct {
	cfg     *simConfig
	client  kubernetes.Interface
	names   []string
	nodeSet map[string]bool
	queue   workqueue.TypedRateLimitingInterface[string]
	pods    corelisters.PodLister
}

func simnodes(ctx context.Context, c *simConfig) error {
	restCfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig %s: %w", c.kubeconfig, err)
	}
	restCfg.QPS, restCfg.Burst = 500, 1000
	restCfg.UserAgent = "tessera-simnodes"
	restCfg.ContentType = "application/vnd.kubernetes.protobuf"
	restCfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	s := &sim{cfg: c, client: client, names: c.nodeNames(), nodeSet: map[string]bool{}}
	for _, n := range s.names {
		s.nodeSet[n] = true
	}

	// The kubelet side first, so that pods bound while the nodes register
	// (or left from an earlier run) are handled from the start.
	s.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "simnodes"})
	factory := informers.NewSharedInformerFactory(client, 0)
	podInformer := factory.Core().V1().Pods()
	s.pods = podInformer.Lister()
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.podChanged,
		UpdateFunc: func(_, obj any) { s.podChanged(obj) },
	}); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		s.queue.ShutDown()
		cancel()
		wg.Wait()
		factory.Shutdown()
	}()
	factory.Start(runCtx.Done())
	for i := 0; i < simWorkers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s.processNext(runCtx) {
			}
		}()
	}

	start := time.Now()
	if err := s.registerNodes(ctx); err != nil {
		if ctx.Err() != nil {
			return s.exit()
		}
		return err
	}
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			if ctx.Err() != nil {
				return s.exit()
			}
			return fmt.Errorf("pod informer (%v) did not sync", typ)
		}
	}
	if c.readyFile != "" {
		if err := writeFileAtomic(c.readyFile, []byte(strings.Join(s.names, "\n")+"\n")); err != nil {
			return fmt.Errorf("--ready-file: %w", err)
		}
	}
	fmt.Fprintf(os.Stderr, "simnodes: registered %s..%s in %v\n", s.names[0], s.names[len(s.names)-1], time.Since(start).Round(time.Millisecond))
	fmt.Printf("simnodes: ready %d nodes\n", len(s.names))

	ticker := time.NewTicker(simHeartbeat)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return s.exit()
		case <-ticker.C:
			s.heartbeat(ctx)
		}
	}
}

// exit runs on SIGINT/SIGTERM. The nodes stay unless --delete-on-exit (a
// test may start simnodes again on the same nodes).
func (s *sim) exit() error {
	if !s.cfg.deleteOnExit {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Pods of a deleted node would otherwise never finish deleting (there is
	// no pod garbage collector without kube-controller-manager).
	var errs []error
	if pods, err := s.pods.List(labels.Everything()); err == nil {
		for _, p := range pods {
			if s.nodeSet[p.Spec.NodeName] {
				if err := s.deletePod(ctx, p); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	for _, n := range s.names {
		if err := s.client.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete node %s: %w", n, err))
		}
	}
	if len(errs) == 0 {
		fmt.Fprintf(os.Stderr, "simnodes: deleted %d nodes\n", len(s.names))
	}
	return errors.Join(errs...)
}

// --- nodes ---------------------------------------------------------------

type inventoryGPU struct {
	UUID         string       `json:"uuid"`
	Index        int          `json:"index"`
	Model        string       `json:"model"`
	MemoryBytes  int64        `json:"memoryBytes"`
	SMCount      int          `json:"smCount"`
	NUMANode     int          `json:"numaNode"`
	Managed      bool         `json:"managed"`
	Health       string       `json:"health"`
	HealthReason string       `json:"healthReason"`
	MIG          inventoryMIG `json:"mig"`
}

type inventoryMIG struct {
	Mode      string            `json:"mode"`
	Instances []json.RawMessage `json:"instances"`
}

type inventory struct {
	APIVersion   string         `json:"apiVersion"`
	Node         string         `json:"node"`
	AgentVersion string         `json:"agentVersion"`
	Generation   int64          `json:"generation"`
	UpdatedAt    string         `json:"updatedAt"`
	GPUs         []inventoryGPU `json:"gpus"`
}

// gpuUUID is deterministic in the node name and GPU index, in NVIDIA's shape
// GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func gpuUUID(node string, index int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", node, index)))
	h := hex.EncodeToString(sum[:16])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func (s *sim) gpus(node string) []inventoryGPU {
	gpus := make([]inventoryGPU, 0, s.cfg.gpus)
	for i := 0; i < s.cfg.gpus; i++ {
		gpus = append(gpus, inventoryGPU{
			UUID: gpuUUID(node, i), Index: i, Model: s.cfg.gpuModel,
			MemoryBytes: s.cfg.gpuMemory, SMCount: s.cfg.smCount,
			NUMANode: i * 2 / s.cfg.gpus, Managed: true, Health: "healthy",
			MIG: inventoryMIG{Mode: "disabled", Instances: []json.RawMessage{}},
		})
	}
	return gpus
}

func marshalCompact(v any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// inventoryAnnotation returns the annotation for node. Given the node's
// current one: unchanged GPUs keep it as it is; changed GPUs bump its
// generation.
func (s *sim) inventoryAnnotation(node, current string) (string, error) {
	inv := inventory{
		APIVersion: inventoryAPIVer, Node: node, AgentVersion: "simnodes", Generation: 1,
		UpdatedAt: time.Now().UTC().Format(time.RFC3339), GPUs: s.gpus(node),
	}
	if current != "" {
		var old inventory
		if json.Unmarshal([]byte(current), &old) == nil && old.APIVersion == inventoryAPIVer && old.Generation > 0 {
			a, _ := json.Marshal(old.GPUs)
			b, _ := json.Marshal(inv.GPUs)
			if old.Node == node && bytes.Equal(a, b) {
				return current, nil
			}
			inv.Generation = old.Generation + 1
		}
	}
	return marshalCompact(inv)
}

func (s *sim) resources() corev1.ResourceList {
	g := int64(s.cfg.gpus)
	return corev1.ResourceList{
		corev1.ResourceCPU:              s.cfg.cpu,
		corev1.ResourceMemory:           s.cfg.memory,
		corev1.ResourcePods:             *resource.NewQuantity(int64(s.cfg.maxPods), resource.DecimalSI),
		corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
		resGPU:                          *resource.NewQuantity(g, resource.DecimalSI),
		resGPUMemory:                    *resource.NewQuantity(g*s.cfg.gpuMemory, s.cfg.gpuMemFormat),
		resGPUCores:                     *resource.NewQuantity(g*100, resource.DecimalSI),
		resGPUSlot:                      *resource.NewQuantity(g*int64(s.cfg.slots), resource.DecimalSI),
	}
}

func kubeletVersion() string {
	if v := moduleVersion("k8s.io/kubernetes"); strings.HasPrefix(v, "v1.") {
		return v
	}
	return "v1.36.3"
}

func (s *sim) nodeStatus(node string) corev1.NodeStatus {
	now := metav1.Now()
	cond := func(t corev1.NodeConditionType, st corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: st, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	id := sha256.Sum256([]byte("node/" + node))
	machineID := hex.EncodeToString(id[:16])
	return corev1.NodeStatus{
		Capacity:    s.resources(),
		Allocatable: s.resources(),
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "simulated node has sufficient memory available"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "simulated node has no disk pressure"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "simulated node has sufficient PID available"),
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "simulated kubelet (tessera-testcluster simnodes) is posting ready status"),
		},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: node}},
		NodeInfo: corev1.NodeSystemInfo{
			MachineID: machineID, SystemUUID: machineID, BootID: machineID,
			KernelVersion: "simnodes", OSImage: "tessera simulated node",
			ContainerRuntimeVersion: "simnodes://0", KubeletVersion: kubeletVersion(),
			OperatingSystem: "linux", Architecture: runtime.GOARCH,
		},
	}
}

// applyMeta sets simnodes' labels and inventory on node and removes the
// not-ready taint (added to every new Node by the TaintNodesByCondition
// admission plugin; normally the node lifecycle controller removes it).
func (s *sim) applyMeta(node *corev1.Node) (changed bool, err error) {
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	for k, v := range map[string]string{
		"kubernetes.io/hostname": node.Name, "kubernetes.io/os": "linux",
		"kubernetes.io/arch": runtime.GOARCH, labelSimulated: "true",
	} {
		if node.Labels[k] != v {
			node.Labels[k], changed = v, true
		}
	}
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	inv, err := s.inventoryAnnotation(node.Name, node.Annotations[annInventory])
	if err != nil {
		return false, err
	}
	if node.Annotations[annInventory] != inv {
		node.Annotations[annInventory], changed = inv, true
	}
	taints := node.Spec.Taints[:0:0]
	for _, t := range node.Spec.Taints {
		if t.Key == notReadyTaint {
			changed = true
			continue
		}
		taints = append(taints, t)
	}
	node.Spec.Taints = taints
	return changed, nil
}

// ensureNode creates the node or brings an existing one up to date, then
// writes its status through the status subresource.
func (s *sim) ensureNode(ctx context.Context, name string) error {
	nodes := s.client.CoreV1().Nodes()
	retriable := func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }
	return retry.OnError(retry.DefaultBackoff, retriable, func() error {
		node, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			fresh := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
			if _, err := s.applyMeta(fresh); err != nil {
				return err
			}
			node, err = nodes.Create(ctx, fresh, metav1.CreateOptions{})
		}
		if err != nil {
			return err
		}
		changed, err := s.applyMeta(node)
		if err != nil {
			return err
		}
		if changed {
			if node, err = nodes.Update(ctx, node, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		node.Status = s.nodeStatus(name)
		_, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

func (s *sim) registerNodes(ctx context.Context) error {
	sem := make(chan struct{}, 16)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, n := range s.names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := s.ensureNode(ctx, n); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("node %s: %w", n, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// heartbeat refreshes the conditions' lastHeartbeatTime, as a kubelet does.
// A strategic-merge patch touches nothing else, so a test that set a
// condition itself keeps it.
func (s *sim) heartbeat(ctx context.Context) {
	now := metav1.Now().UTC().Format(time.RFC3339)
	var conds []string
	for _, t := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeReady} {
		conds = append(conds, fmt.Sprintf(`{"type":%q,"lastHeartbeatTime":%q}`, t, now))
	}
	patch := []byte(`{"status":{"conditions":[` + strings.Join(conds, ",") + `]}}`)
	for _, n := range s.names {
		_, err := s.client.CoreV1().Nodes().Patch(ctx, n, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "simnodes: heartbeat %s: %v\n", n, err)
		}
	}
}

// --- pods ----------------------------------------------------------------

func podNeedsWork(p *corev1.Pod) bool {
	return p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodPending || p.Status.Phase == ""
}

func (s *sim) podChanged(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || !s.nodeSet[p.Spec.NodeName] || !podNeedsWork(p) {
		return
	}
	if key, err := cache.MetaNamespaceKeyFunc(p); err == nil {
		s.queue.Add(key)
	}
}

func (s *sim) processNext(ctx context.Context) bool {
	key, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(key)
	err := s.syncPod(ctx, key)
	switch {
	case err == nil:
		s.queue.Forget(key)
	case s.queue.NumRequeues(key) < simMaxRetries:
		s.queue.AddRateLimited(key)
	default:
		fmt.Fprintf(os.Stderr, "simnodes: pod %s: giving up: %v\n", key, err)
		s.queue.Forget(key)
	}
	return true
}

func (s *sim) syncPod(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	p, err := s.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !s.nodeSet[p.Spec.NodeName] || !podNeedsWork(p) {
		return nil
	}
	if p.DeletionTimestamp != nil {
		return s.deletePod(ctx, p)
	}
	running := p.DeepCopy()
	setPodRunning(running)
	_, err = s.client.CoreV1().Pods(ns).UpdateStatus(ctx, running, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err // a conflict retries with the newer copy from the cache
}

// deletePod finalizes a pod's deletion, as kubelet does once its containers
// are gone: grace period 0, only this very pod (UID precondition).
func (s *sim) deletePod(ctx context.Context, p *corev1.Pod) error {
	return finalizePodDeletion(ctx, s.client, p)
}

func finalizePodDeletion(ctx context.Context, client kubernetes.Interface, p *corev1.Pod) error {
	zero := int64(0)
	uid := p.UID
	err := client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero,
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) { // gone, or replaced by a new pod of the same name
		return nil
	}
	return err
}

func setPodRunning(p *corev1.Pod) {
	now := metav1.Now()
	st := &p.Status
	st.Phase = corev1.PodRunning
	if st.StartTime == nil {
		st.StartTime = &now
	}
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodReadyToStartContainers,
		corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		setPodCondition(st, t, now)
	}
	containerID := func(c string) string {
		h := sha256.Sum256([]byte(string(p.UID) + "/" + c))
		return "simnodes://" + hex.EncodeToString(h[:])
	}
	started := true
	running := func(c corev1.Container) corev1.ContainerStatus {
		return corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ContainerID: containerID(c.Name),
			Ready: true, Started: &started,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}
	}
	st.InitContainerStatuses = nil
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			st.InitContainerStatuses = append(st.InitContainerStatuses, running(c)) // a sidecar
			continue
		}
		notStarted := false
		st.InitContainerStatuses = append(st.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ContainerID: containerID(c.Name), Started: &notStarted,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now, ContainerID: containerID(c.Name)}},
		})
	}
	st.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, running(c))
	}
}

func setPodCondition(st *corev1.PodStatus, t corev1.PodConditionType, now metav1.Time) {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			if st.Conditions[i].Status != corev1.ConditionTrue {
				st.Conditions[i].Status, st.Conditions[i].LastTransitionTime = corev1.ConditionTrue, now
				st.Conditions[i].Reason, st.Conditions[i].Message = "", ""
			}
			return
		}
	}
	st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
}

// --- helpers -------------------------------------------------------------

func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
