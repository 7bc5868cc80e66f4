// Command nodepool-hash writes the golden vectors of Capstan's NodePool template hash
// (host/src/api/template_hash/vectors.json) with Karpenter's own code: it reads the vectors file,
// decodes each case's `template` into Karpenter's NodePool (sigs.k8s.io/karpenter/pkg/apis/v1, the
// version this module pins), and writes the file back with `hash` set to NodePool.Hash() and
// `hashVersion` to NodePoolHashVersion. Run it with gen-vectors.sh (which sets TZ=UTC, as in
// Karpenter's image: a taint's timeAdded is decoded in the local zone).
package main

import (
	"encoding/json"
	"fmt"
	"os"

	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

type vector struct {
	Name     string          `json:"name"`
	Template json.RawMessage `json:"template"`
	Hash     string          `json:"hash"`
}

type vectors struct {
	Comment     string   `json:"comment"`
	Karpenter   string   `json:"karpenter"`
	HashVersion string   `json:"hashVersion"`
	Cases       []vector `json:"cases"`
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: nodepool-hash VECTORS.json KARPENTER_VERSION")
		os.Exit(2)
	}
	path := os.Args[1]
	raw, err := os.ReadFile(path)
	if err != nil {
		fail(err)
	}
	var vs vectors
	if err := json.Unmarshal(raw, &vs); err != nil {
		fail(fmt.Errorf("%s: %w", path, err))
	}
	vs.Karpenter = os.Args[2]
	vs.HashVersion = v1.NodePoolHashVersion
	for i := range vs.Cases {
		c := &vs.Cases[i]
		pool := v1.NodePool{}
		if err := json.Unmarshal(c.Template, &pool.Spec.Template); err != nil {
			fail(fmt.Errorf("case %q: %w", c.Name, err))
		}
		c.Hash = pool.Hash()
	}
	out, err := json.MarshalIndent(vs, "", "  ")
	if err != nil {
		fail(err)
	}
	if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "nodepool-hash:", err)
	os.Exit(1)
}
