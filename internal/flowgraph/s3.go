package flowgraph

import (
	"strings"

	"github.com/agenthost/host/internal/functions"
)

// s3Sources are the on: s3: lines as sources: one node per bucket, prefix and kinds, which
// nothing in the graph publishes to (an S3 server does).
func s3Sources(fns map[string]*functions.Function, names []string, seen map[string]bool) (nodes []Node, edges []Edge) {
	for _, name := range names {
		for _, on := range fns[name].Spec.S3 {
			var kinds []string
			if on.Created {
				kinds = append(kinds, "created")
			}
			if on.Removed {
				kinds = append(kinds, "removed")
			}
			label := "s3:" + on.Bucket + "/" + on.Prefix + " " + strings.Join(kinds, ",")
			id := string(Source) + ":" + label
			if !seen[id] {
				seen[id] = true
				nodes = append(nodes, Node{ID: id, Kind: Source, Label: label})
			}
			edges = append(edges, Edge{From: id, To: name, Kind: Trigger, Subject: label})
		}
	}
	return nodes, edges
}
