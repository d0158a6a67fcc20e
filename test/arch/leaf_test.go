package arch

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/agenthost/host/"

// jail is what runs a job: the runner, the sandbox, the egress proxy, the package installer
// and the jail's init. A face does not run jobs, it sends them.
var jail = []string{"internal/sandbox", "internal/runner", "internal/egress", "internal/packages", "internal/jailinit"}

// TestFacesDoNotCompileTheJail: the faces (web, dashboard, MCP, the client), what loads
// functions and the engine (which drives a runner through jobtype) reach the contracts they
// check (jobtype.DecodePayload, egressrule.Check, manifest.Check) without compiling what runs
// a job (issue 38, item 2).
func TestFacesDoNotCompileTheJail(t *testing.T) {
	faces := []string{"internal/web", "internal/dashboard", "internal/mcp", "internal/client", "internal/functions", "internal/host"}
	graph := imports(t, faces)
	for _, face := range faces {
		for _, chain := range reach(graph, module+face, jail) {
			t.Errorf("%s compiles %s: %s", face, strings.TrimPrefix(chain[len(chain)-1], module),
				strings.ReplaceAll(strings.Join(chain, " -> "), module, ""))
		}
	}
}

// imports is the import graph under pkgs (module-relative), from `go list -deps`.
func imports(t *testing.T, pkgs []string) map[string][]string {
	t.Helper()
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	args := []string{"list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`}
	for _, p := range pkgs {
		args = append(args, "./"+p)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = strings.TrimSpace(string(root))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	graph := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 {
			graph[f[0]] = f[1:]
		}
	}
	if len(graph) == 0 {
		t.Fatal("go list -deps listed nothing")
	}
	return graph
}

// reach returns, for each of targets (module-relative) that from imports, the shortest import
// chain leading to it.
func reach(graph map[string][]string, from string, targets []string) [][]string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, q := range graph[p] {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	var chains [][]string
	for _, t := range targets {
		t = module + t
		if _, ok := prev[t]; !ok {
			continue
		}
		var chain []string
		for p := t; p != ""; p = prev[p] {
			chain = append([]string{p}, chain...)
		}
		chains = append(chains, chain)
	}
	return chains
}
