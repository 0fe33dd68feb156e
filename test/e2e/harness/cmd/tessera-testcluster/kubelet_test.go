package main

// The kubelet subcommand against a fake API server and a small test device
// plugin (a gRPC server written here, standing in for tessera-node). What is
// under test is the wiring of the upstream device manager, topology manager
// and PodResources server: registration, Node capacity, admission
// (GetPreferredAllocation + Allocate), container start (PreStartContainer,
// during which the plugin asks the PodResources API who holds the device),
// rejection, PreStart failure, release on deletion, and shutdown.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
)

const testResource = "tessera.dev/gpu-slot"

type testPlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	t          *testing.T
	prSocket   string
	devices    []string
	mu         sync.Mutex
	preStarted map[string]string // device ID -> "ns/pod/container" seen through PodResources
	failFor    string            // pod name whose PreStartContainer fails
}

func (p *testPlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true}, nil
}

func (p *testPlugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	var devs []*pluginapi.Device
	for _, id := range p.devices {
		devs = append(devs, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

// GetPreferredAllocation prefers the highest IDs, so that a test can tell it was asked.
func (p *testPlugin) GetPreferredAllocation(_ context.Context, r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range r.ContainerRequests {
		ids := append([]string{}, c.AvailableDeviceIDs...)
		sort.Sort(sort.Reverse(sort.StringSlice(ids)))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids[:c.AllocationSize]})
	}
	return resp, nil
}

func (p *testPlugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range r.ContainerRequests {
		ids := strings.Join(c.DevicesIds, ",")
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs:        map[string]string{"TESSERA_SLOTS": ids},
			Mounts:      []*pluginapi.Mount{{ContainerPath: "/run/tessera", HostPath: "/var/run/tessera/" + c.DevicesIds[0], ReadOnly: true}},
			Annotations: map[string]string{"tessera.dev/slots": ids},
			CdiDevices:  []*pluginapi.CDIDevice{{Name: "tessera.dev/slot=" + c.DevicesIds[0]}},
		})
	}
	return resp, nil
}

// PreStartContainer does what tessera-node's does: ask the PodResources API
// which pod and container hold the device.
func (p *testPlugin) PreStartContainer(ctx context.Context, r *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	client, conn, err := podresources.GetV1Client(p.prSocket, 10*time.Second, 16*1024*1024)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	resp, err := client.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, id := range r.DevicesIds {
		want[id] = true
	}
	for _, pr := range resp.PodResources {
		for _, c := range pr.Containers {
			for _, d := range c.Devices {
				if d.ResourceName != testResource || len(d.DeviceIds) == 0 || !want[d.DeviceIds[0]] {
					continue
				}
				if pr.Name == p.failFor {
					return nil, fmt.Errorf("test plugin: refusing %s", pr.Name)
				}
				p.mu.Lock()
				p.preStarted[d.DeviceIds[0]] = pr.Namespace + "/" + pr.Name + "/" + c.Name
				p.mu.Unlock()
			}
		}
	}
	return &pluginapi.PreStartContainerResponse{}, nil
}

func (p *testPlugin) owner(id string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.preStarted[id]
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func slotPod(node, ns, name string, slots int64) *corev1.Pod {
	q := *resource.NewQuantity(slots, resource.DecimalSI)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "main", Image: "x",
			Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{testResource: q},
				Requests: corev1.ResourceList{testResource: q},
			},
		}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

func TestKubeletDeviceManager(t *testing.T) {
	dir, err := os.MkdirTemp("", "kt") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cfg := &kubeletConfig{
		node: "n1", pluginDir: filepath.Join(dir, "dp"), podResourcesSocket: filepath.Join(dir, "pr.sock"),
		resultsDir: filepath.Join(dir, "res"), cpu: resource.MustParse("8"), memory: resource.MustParse("8Gi"),
		maxPods: 10, statusInterval: 50 * time.Millisecond, prQPS: 100, prBurst: 10,
	}
	// TESSERA_TEST_KUBECONFIG: run against a real cluster (`tessera-testcluster up`,
	// with the default ServiceAccount created) instead of a fake clientset.
	var client kubernetes.Interface = fake.NewClientset()
	ns := "default"
	if kc := os.Getenv("TESSERA_TEST_KUBECONFIG"); kc != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", kc)
		if err != nil {
			t.Fatal(err)
		}
		if client, err = kubernetes.NewForConfig(rc); err != nil {
			t.Fatal(err)
		}
		cfg.node = fmt.Sprintf("kt-%d", time.Now().Unix())
		ns = cfg.node
		if _, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// No controller-manager: the ServiceAccount admission plugin wants this.
		if _, err := client.CoreV1().ServiceAccounts(ns).Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runKubeletNode(ctx, cfg, client) }()
	kubeletSock := filepath.Join(cfg.pluginDir, "kubelet.sock")
	waitFor(t, "kubelet.sock", func() bool { _, err := os.Stat(kubeletSock); return err == nil })

	// The plugin: serve, then register (kubelet dials back inside Register).
	plugin := &testPlugin{t: t, prSocket: cfg.podResourcesSocket, devices: []string{"s0", "s1", "s2", "s3"},
		preStarted: map[string]string{}, failFor: "bad-start"}
	l, err := net.Listen("unix", filepath.Join(cfg.pluginDir, "test.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, plugin)
	go srv.Serve(l)
	defer srv.Stop()
	conn, err := grpc.NewClient("unix://"+kubeletSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: "test.sock", ResourceName: testResource,
		Options: &pluginapi.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true},
	}); err != nil {
		t.Fatal(err)
	}

	nodeValue := func(r corev1.ResourceName) int64 {
		n, err := client.CoreV1().Nodes().Get(ctx, cfg.node, metav1.GetOptions{})
		if err != nil {
			return -1
		}
		q, ok := n.Status.Allocatable[r]
		if !ok {
			return -1
		}
		return q.Value()
	}
	waitFor(t, "node allocatable 4 slots", func() bool { return nodeValue(testResource) == 4 })
	if v := nodeValue(corev1.ResourcePods); v != 10 {
		t.Errorf("allocatable pods = %d, want 10", v)
	}

	readResult := func(pod string) (r containerResult, ok bool) {
		data, err := os.ReadFile(filepath.Join(cfg.resultsDir, ns+"_"+pod+"_main.json"))
		if err != nil {
			return r, false
		}
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatalf("%s: %v", pod, err)
		}
		return r, true
	}
	podPhase := func(name string) corev1.PodPhase {
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "gone"
		}
		return p.Status.Phase
	}

	// 1. Two slots: preferred allocation (highest IDs), Allocate's answer in
	// the results, PreStartContainer saw the pod through PodResources.
	if _, err := client.CoreV1().Pods(ns).Create(ctx, slotPod(cfg.node, ns, "good", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod good Running", func() bool { return podPhase("good") == corev1.PodRunning })
	r, ok := readResult("good")
	if !ok {
		t.Fatal("no result for pod good")
	}
	if got := strings.Join(r.Devices[testResource], ","); got != "s2,s3" || r.Error != "" {
		t.Errorf("good: devices %q error %q, want s2,s3 and no error", got, r.Error)
	}
	if r.Envs["TESSERA_SLOTS"] == "" || len(r.Mounts) != 1 || len(r.CDIDevices) != 1 || r.Annotations["tessera.dev/slots"] == "" {
		t.Errorf("good: runtime options not from Allocate: %+v", r)
	}
	for _, id := range []string{"s2", "s3"} {
		if o := plugin.owner(id); o != ns+"/good/main" {
			t.Errorf("PreStartContainer for %s saw owner %q, want default/good/main", id, o)
		}
	}

	// 2. More slots than are free: rejected at admission.
	if _, err := client.CoreV1().Pods(ns).Create(ctx, slotPod(cfg.node, ns, "toobig", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod toobig Failed", func() bool { return podPhase("toobig") == corev1.PodFailed })
	p, _ := client.CoreV1().Pods(ns).Get(ctx, "toobig", metav1.GetOptions{})
	if p.Status.Reason != "UnexpectedAdmissionError" || !strings.Contains(p.Status.Message, "requested number of devices unavailable") {
		t.Errorf("toobig: reason %q message %q", p.Status.Reason, p.Status.Message)
	}
	if r, ok := readResult("toobig"); !ok || r.Stage != "admission" || r.Error == "" {
		t.Errorf("toobig: result %+v", r)
	}
	waitFor(t, "rejection event", func() bool {
		evs, _ := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "toobig" && e.Type == corev1.EventTypeWarning && e.Reason == "UnexpectedAdmissionError" {
				return true
			}
		}
		return false
	})

	// 3. PreStartContainer fails: the pod stays Pending, the container waits.
	if _, err := client.CoreV1().Pods(ns).Create(ctx, slotPod(cfg.node, ns, "bad-start", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "bad-start result", func() bool { r, ok := readResult("bad-start"); return ok && r.Stage == "prestart" })
	if ph := podPhase("bad-start"); ph != corev1.PodPending {
		t.Errorf("bad-start: phase %s, want Pending", ph)
	}
	if err := client.CoreV1().Pods(ns).Delete(ctx, "bad-start", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// 4. Deleting pod good frees its slots: four fit again.
	if err := client.CoreV1().Pods(ns).Delete(ctx, "good", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "good gone from PodResources", func() bool {
		c, conn, err := podresources.GetV1Client(cfg.podResourcesSocket, 5*time.Second, 16*1024*1024)
		if err != nil {
			return false
		}
		defer conn.Close()
		resp, err := c.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
		if err != nil {
			return false
		}
		for _, pr := range resp.PodResources {
			if pr.Name == "good" {
				return false
			}
		}
		return true
	})
	if _, err := client.CoreV1().Pods(ns).Create(ctx, slotPod(cfg.node, ns, "all", 4), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod all Running", func() bool { return podPhase("all") == corev1.PodRunning })

	// 5. Shutdown removes both sockets; the checkpoint stays.
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("kubelet did not stop")
	}
	for _, s := range []string{kubeletSock, cfg.podResourcesSocket} {
		if _, err := os.Stat(s); !os.IsNotExist(err) {
			t.Errorf("%s still exists after shutdown", s)
		}
	}
	if _, err := os.Stat(filepath.Join(cfg.pluginDir, "kubelet_internal_checkpoint")); err != nil {
		t.Errorf("checkpoint: %v", err)
	}

	// 6. A restart on the same plugin dir is a kubelet restart: the manager
	// removes the plugin's socket, the plugin serves and registers again, and
	// the allocation of pod all comes back from the checkpoint, so a new
	// one-slot pod does not fit.
	srv.Stop()
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- runKubeletNode(ctx, cfg, client) }()
	waitFor(t, "kubelet.sock again", func() bool { _, err := os.Stat(kubeletSock); return err == nil })
	if _, err := os.Stat(filepath.Join(cfg.pluginDir, "test.sock")); !os.IsNotExist(err) {
		t.Errorf("the plugin's socket survived the restart: %v", err)
	}
	if l, err = net.Listen("unix", filepath.Join(cfg.pluginDir, "test.sock")); err != nil {
		t.Fatal(err)
	}
	srv = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, plugin)
	go srv.Serve(l)
	defer srv.Stop()
	conn2, err := grpc.NewClient("unix://"+kubeletSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	if _, err := pluginapi.NewRegistrationClient(conn2).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: "test.sock", ResourceName: testResource,
		Options: &pluginapi.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true},
	}); err != nil {
		t.Fatal(err)
	}
	// Register returns before the first ListAndWatch answer is in; until
	// then the resource has no healthy devices (as after a kubelet restart).
	waitFor(t, "4 allocatable devices in PodResources", func() bool {
		c, conn, err := podresources.GetV1Client(cfg.podResourcesSocket, 5*time.Second, 16*1024*1024)
		if err != nil {
			return false
		}
		defer conn.Close()
		resp, err := c.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
		return err == nil && len(resp.Devices) == 4
	})
	if _, err := client.CoreV1().Pods(ns).Create(ctx, slotPod(cfg.node, ns, "one", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod one Failed", func() bool { return podPhase("one") == corev1.PodFailed })
	if p, _ := client.CoreV1().Pods(ns).Get(ctx, "one", metav1.GetOptions{}); !strings.Contains(p.Status.Message, "Requested: 1, Available: 0") {
		t.Errorf("one: message %q, want the checkpointed allocation of pod all to leave no slot", p.Status.Message)
	}
	if ph := podPhase("all"); ph != corev1.PodRunning {
		t.Errorf("all: phase %s after restart, want Running", ph)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
