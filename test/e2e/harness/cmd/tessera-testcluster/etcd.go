package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// startEtcd starts a single-member embedded etcd with plain-HTTP client and
// peer listeners on loopback. The caller must Close() the returned server.
func startEtcd(dataDir string, clientPort, peerPort int, logLevel string) (*embed.Etcd, string, error) {
	cfg := embed.NewConfig()
	cfg.Name = "tessera-e2e"
	cfg.Dir = dataDir
	cfg.LogLevel = logLevel
	cfg.Logger = "zap"
	cfg.LogOutputs = []string{"stderr"}
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// Test data is throw-away: trade durability for speed.
	cfg.UnsafeNoFsync = true
	// embed.NewConfig leaves this at 0 (only etcd's own flag parsing applies
	// the 300ms default), which logs every request as "expensive".
	cfg.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, "", fmt.Errorf("etcd did not become ready within 60s")
	case err := <-e.Err():
		e.Close()
		return nil, "", err
	}
	return e, clientURL.String(), nil
}

func runEtcd(args []string) int {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "data directory (default: a new temporary directory)")
	clientPort := fs.Int("client-port", 2379, "client port on 127.0.0.1 (0: pick a free one)")
	peerPort := fs.Int("peer-port", 0, "peer port on 127.0.0.1 (0: pick a free one)")
	logLevel := fs.String("log-level", "warn", "etcd log level")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dataDir == "" {
		d, err := os.MkdirTemp("", "tessera-etcd-")
		if err != nil {
			return fatalf("%v", err)
		}
		defer os.RemoveAll(d)
		*dataDir = d
	}
	var err error
	if *clientPort == 0 {
		if *clientPort, err = freePort(); err != nil {
			return fatalf("%v", err)
		}
	}
	if *peerPort == 0 {
		if *peerPort, err = freePort(); err != nil {
			return fatalf("%v", err)
		}
	}
	e, endpoint, err := startEtcd(*dataDir, *clientPort, *peerPort, *logLevel)
	if err != nil {
		return fatalf("etcd: %v", err)
	}
	defer e.Close()
	fmt.Println(endpoint)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case <-ctx.Done():
		return 0
	case err := <-e.Err():
		return fatalf("etcd: %v", err)
	}
}
