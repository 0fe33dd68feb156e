package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	basecompatibility "k8s.io/component-base/compatibility"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	apiserveroptions "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	schedulerapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	scheduleroptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
)

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// runUp starts etcd, kube-apiserver and kube-scheduler in this one process,
// writes an admin kubeconfig and runs until SIGINT/SIGTERM.
func runUp(args []string) int {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "where to write the cluster-admin kubeconfig (required)")
	stateDir := fs.String("dir", "", "state directory for etcd data and credentials (default: a new temporary directory, removed on exit)")
	etcdLogLevel := fs.String("etcd-log-level", "warn", "etcd log level")
	noScheduler := fs.Bool("no-scheduler", false, "do not start kube-scheduler")
	advertise := fs.String("advertise-address", "", "serve the API on every address (not only loopback) and publish this IP as the \"kubernetes\" Service's endpoint, so that pods of a real node reach it through kube-proxy (default: loopback only, no endpoint)")
	schedulerConfig := fs.String("scheduler-config", "", "KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) YAML for kube-scheduler's --config; clientConnection.kubeconfig, qps, burst and leaderElection.leaderElect are filled in unless the file sets them; the completed file is <dir>/kube-scheduler-config.yaml")
	var apiserverArgs, schedulerArgs stringList
	fs.Var(&apiserverArgs, "apiserver-arg", "extra kube-apiserver flag, e.g. --apiserver-arg=--feature-gates=Foo=true (repeatable; wins over the defaults)")
	fs.Var(&schedulerArgs, "scheduler-arg", "extra kube-scheduler flag (repeatable; wins over the defaults); --v/--vmodule set the scheduler's own log verbosity")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *kubeconfig == "" {
		return fatalf("up: --kubeconfig is required")
	}
	if *schedulerConfig != "" && *noScheduler {
		return fatalf("up: --scheduler-config and --no-scheduler exclude each other")
	}
	if *advertise != "" {
		ip := net.ParseIP(*advertise)
		if ip == nil || ip.IsLoopback() || ip.IsUnspecified() {
			return fatalf("up: --advertise-address %q: expected the node's own non-loopback IP address", *advertise)
		}
	}
	if err := up(*kubeconfig, *stateDir, *etcdLogLevel, !*noScheduler, *schedulerConfig, *advertise, apiserverArgs, schedulerArgs); err != nil {
		return fatalf("up: %v", err)
	}
	return 0
}

func up(kubeconfig, stateDir, etcdLogLevel string, withScheduler bool, schedulerConfig, advertise string, apiserverArgs, schedulerArgs []string) (retErr error) {
	// One signal context for the whole process: upstream's handler may only be
	// installed once, so up cannot use the upstream cobra commands as a whole.
	ctx := genericapiserver.SetupSignalContext()

	if stateDir == "" {
		d, err := os.MkdirTemp("", "tessera-testcluster-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		stateDir = d
	}
	absKubeconfig, err := filepath.Abs(kubeconfig)
	if err != nil {
		return err
	}
	if stateDir, err = filepath.Abs(stateDir); err != nil {
		return err
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	adminKubeconfig := filepath.Join(stateDir, "admin.kubeconfig")

	// The test's scheduler configuration, completed with this cluster's
	// kubeconfig; checked before anything starts, so that a bad file fails fast.
	schedulerConfigFile := ""
	if withScheduler && schedulerConfig != "" {
		schedulerConfigFile = filepath.Join(stateDir, "kube-scheduler-config.yaml")
		if err := prepareSchedulerConfig(schedulerConfig, schedulerConfigFile, adminKubeconfig); err != nil {
			return err
		}
	}

	p, err := generatePKI(filepath.Join(stateDir, "pki"))
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}

	// etcd.
	clientPort, err := freePort()
	if err != nil {
		return err
	}
	peerPort, err := freePort()
	if err != nil {
		return err
	}
	etcd, etcdURL, err := startEtcd(filepath.Join(stateDir, "etcd"), clientPort, peerPort, etcdLogLevel)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer etcd.Close()
	klog.InfoS("tessera-testcluster: etcd ready", "url", etcdURL)

	// kube-apiserver, serving on a listener we already hold (no port race). With an advertise
	// address, on every address: the admin kubeconfig keeps loopback, pods reach it through the
	// "kubernetes" Service (kube-proxy; the serving certificate names 10.0.0.1).
	listen := "127.0.0.1"
	if advertise != "" {
		listen = "0.0.0.0"
	}
	ln, err := net.Listen("tcp", listen+":0")
	if err != nil {
		return err
	}
	apiPort := ln.Addr().(*net.TCPAddr).Port
	server := fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	if err := p.writeKubeconfig(adminKubeconfig, server); err != nil {
		return err
	}

	s := apiserveroptions.NewServerRunOptions()
	apiFlags := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, f := range s.Flags().FlagSets {
		apiFlags.AddFlagSet(f)
	}
	defaults := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + listen,
		fmt.Sprintf("--secure-port=%d", apiPort),
		"--tls-cert-file=" + p.ServingCert,
		"--tls-private-key-file=" + p.ServingKey,
		"--client-ca-file=" + p.CACert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.SAPub,
		"--service-account-signing-key-file=" + p.SAKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC",
		"--cert-dir=" + filepath.Join(stateDir, "apiserver-certs"),
	}
	if advertise != "" {
		defaults = append(defaults, "--advertise-address="+advertise)
	} else {
		// A loopback advertise address is rejected for the "kubernetes" Service's endpoints;
		// without a real node nothing needs them.
		defaults = append(defaults, "--endpoint-reconciler-type=none")
	}
	if err := apiFlags.Parse(append(defaults, apiserverArgs...)); err != nil {
		return fmt.Errorf("kube-apiserver flags: %w", err)
	}
	s.SecureServing.Listener = ln

	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	featureGate := s.GenericServerRunOptions.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	rest.SetDefaultWarningHandler(rest.NoWarnings{})
	if err := logsapi.ValidateAndApply(s.Logs, featureGate); err != nil {
		return err
	}
	completed, err := s.Complete(ctx)
	if err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return fmt.Errorf("kube-apiserver: %w", utilerrors.NewAggregate(errs))
	}
	apiDone := make(chan error, 1)
	go func() { apiDone <- apiserverapp.Run(ctx, completed) }()

	// Wait for /readyz before starting the scheduler and publishing the
	// kubeconfig, so that the kubeconfig's existence means "API is up".
	restCfg, err := clientcmd.BuildConfigFromFlags("", adminKubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	start := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-apiDone:
			return false, fmt.Errorf("kube-apiserver exited: %v", err)
		default:
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
	if err != nil {
		return fmt.Errorf("waiting for kube-apiserver /readyz: %w", err)
	}
	klog.InfoS("tessera-testcluster: kube-apiserver ready", "server", server, "after", time.Since(start).Round(time.Millisecond))

	// kube-scheduler.
	schedDone := make(chan error, 1)
	stopScheduler := func() {}
	defer func() { stopScheduler() }()
	if withScheduler {
		schedPort, err := freePort()
		if err != nil {
			return err
		}
		opts := scheduleroptions.NewOptions()
		schedFlags := pflag.NewFlagSet("kube-scheduler", pflag.ContinueOnError)
		for _, f := range opts.Flags.FlagSets {
			schedFlags.AddFlagSet(f)
		}
		defaults := []string{
			"--authentication-kubeconfig=" + adminKubeconfig,
			"--authorization-kubeconfig=" + adminKubeconfig,
			"--bind-address=127.0.0.1",
			fmt.Sprintf("--secure-port=%d", schedPort),
		}
		if schedulerConfigFile != "" {
			// With --config, kube-scheduler ignores --kubeconfig and the
			// --kube-api-* flags, and a --leader-elect flag would override
			// the file: both are in the completed file instead.
			defaults = append(defaults, "--config="+schedulerConfigFile)
		} else {
			defaults = append(defaults,
				"--kubeconfig="+adminKubeconfig,
				"--leader-elect=false",
				// Upstream's 50/100 makes binding hundreds of pods take
				// seconds of client-side throttling.
				fmt.Sprintf("--kube-api-qps=%d", schedulerQPS),
				fmt.Sprintf("--kube-api-burst=%d", schedulerBurst))
		}
		if err := schedFlags.Parse(append(defaults, schedulerArgs...)); err != nil {
			return fmt.Errorf("kube-scheduler flags: %w", err)
		}
		// Leader election is off by default: with it on, upstream's Run()
		// calls os.Exit as soon as its context is cancelled or the lease
		// cannot be renewed (e.g. while the API server shuts down), which
		// skips the cleanup below. A single scheduler needs no election.
		// Its own context, so that shutdown can stop it before the API server.
		schedCtx, cancel := context.WithCancel(context.Background())
		stopScheduler = cancel
		// The process-wide klog settings belong to the API server (applied
		// above; they can only be applied once). A --scheduler-arg=--v=N or
		// --vmodule gets the scheduler a logger of its own through its
		// context, which is what its code logs through.
		if schedFlags.Changed("v") || schedFlags.Changed("vmodule") {
			logger, err := schedulerLogger(schedFlags)
			if err != nil {
				return fmt.Errorf("kube-scheduler flags: %w", err)
			}
			schedCtx = klog.NewContext(schedCtx, logger)
		}
		cc, sched, err := schedulerapp.Setup(schedCtx, opts)
		if err != nil {
			return fmt.Errorf("kube-scheduler: %w", err)
		}
		go func() { schedDone <- schedulerapp.Run(schedCtx, cc, sched) }()
		klog.InfoS("tessera-testcluster: kube-scheduler started", "healthz", fmt.Sprintf("https://127.0.0.1:%d/healthz", schedPort))
	}

	if err := p.writeKubeconfig(absKubeconfig, server); err != nil {
		return err
	}
	fmt.Printf("tessera-testcluster: up server=%s kubeconfig=%s dir=%s\n", server, absKubeconfig, stateDir)

	select {
	case <-ctx.Done():
		klog.InfoS("tessera-testcluster: shutting down")
	case err := <-apiDone:
		retErr = fmt.Errorf("kube-apiserver exited: %v", err)
		apiDone <- nil // for the wait below
	case err := <-schedDone:
		retErr = fmt.Errorf("kube-scheduler exited: %v", err)
		schedDone <- nil // for the wait below
	}
	// Stop the scheduler first (its watches would otherwise hold up the API
	// server's graceful shutdown), then the API server; bound both waits.
	// The deferred etcd.Close() and state-dir removal run after them.
	stopScheduler()
	if withScheduler {
		select {
		case <-schedDone:
		case <-time.After(10 * time.Second):
			klog.InfoS("tessera-testcluster: kube-scheduler did not stop within 10s")
		}
	}
	select {
	case err := <-apiDone:
		if err != nil && retErr == nil && !errors.Is(err, context.Canceled) {
			klog.ErrorS(err, "kube-apiserver shutdown")
		}
	case <-time.After(30 * time.Second):
		klog.InfoS("tessera-testcluster: kube-apiserver did not stop within 30s")
	}
	_ = os.Remove(absKubeconfig)
	return retErr
}
