package main

// oci-image: a container image without a container engine or a registry, for real nodes in tests
// (issue #24): the files of a folder as one layer, written as an OCI image archive that
// `ctr images import` loads into containerd's store.
//
//	tessera-testcluster oci-image --rootfs DIR --name REF --out FILE [--entrypoint CMD,ARG...]
//
// Entries are sorted, owned by root and dated 1970, so the same folder gives the same bytes.

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	goflag "flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func runOCIImage(args []string) int {
	fl := goflag.NewFlagSet("oci-image", goflag.ContinueOnError)
	rootfs := fl.String("rootfs", "", "the folder whose files make the image's one layer")
	name := fl.String("name", "", "the image reference (e.g. tessera.dev/test/pause:1)")
	out := fl.String("out", "", "the OCI image archive to write")
	entrypoint := fl.String("entrypoint", "", "the image's entrypoint, comma-separated")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	for flag, v := range map[string]string{"--rootfs": *rootfs, "--name": *name, "--out": *out} {
		if v == "" {
			fmt.Fprintf(os.Stderr, "oci-image: %s is required\n", flag)
			return 2
		}
	}
	if err := writeOCIImage(*rootfs, *name, *out, *entrypoint); err != nil {
		fmt.Fprintf(os.Stderr, "oci-image: %v\n", err)
		return 1
	}
	return 0
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// layerTar is the folder as an uncompressed tar, entries sorted, root-owned, dated 0.
func layerTar(root string) ([]byte, error) {
	var paths []string
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		info, err := os.Lstat(p)
		if err != nil {
			return nil, err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return nil, err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, p)
		h.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		h.ModTime, h.AccessTime, h.ChangeTime = time.Unix(0, 0), time.Time{}, time.Time{}
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return nil, err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			if err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeOCIImage(rootfs, name, out, entrypoint string) error {
	layer, err := layerTar(rootfs)
	if err != nil {
		return fmt.Errorf("--rootfs %s: %w", rootfs, err)
	}
	config := map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       map[string]any{"Env": []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{digestOf(layer)}},
	}
	if entrypoint != "" {
		config["config"].(map[string]any)["Entrypoint"] = strings.Split(entrypoint, ",")
	}
	configJSON, _ := json.Marshal(config)
	manifest := map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        ociDescriptor{"application/vnd.oci.image.config.v1+json", digestOf(configJSON), int64(len(configJSON)), nil},
		"layers":        []ociDescriptor{{"application/vnd.oci.image.layer.v1.tar", digestOf(layer), int64(len(layer)), nil}},
	}
	manifestJSON, _ := json.Marshal(manifest)
	index := map[string]any{
		"schemaVersion": 2,
		"manifests": []ociDescriptor{{"application/vnd.oci.image.manifest.v1+json", digestOf(manifestJSON),
			int64(len(manifestJSON)), map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name}}},
	}
	indexJSON, _ := json.Marshal(index)

	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	add := func(path string, data []byte) error {
		h := &tar.Header{Name: path, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	blobs := [][]byte{layer, configJSON, manifestJSON}
	if err := add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := add("index.json", indexJSON); err != nil {
		return err
	}
	for _, b := range blobs {
		if err := add("blobs/sha256/"+strings.TrimPrefix(digestOf(b), "sha256:"), b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
