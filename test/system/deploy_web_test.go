package system_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/host/internal/testkit/hosttest"
)

// greetVersion is a tool function whose description and answer name version v.
func greetVersion(v string) map[string]string {
	return map[string]string{"greet.py": "# tool: Greets, version " + v + "\ndef main(name: str):\n    return \"hello-from-" + v + "\"\n"}
}

// Under --deployed the web face reads what the host serves: /mcp offers the deployed function's
// tool and the dashboard's function page shows its source, and both follow the next deploy.
// (The host's own functions directory is empty: a face reading it would show nothing.)
func TestDeployedWebFaceReadsWhatIsServed(t *testing.T) {
	h := hosttest.New(t, nil, deployed)
	srv := httptest.NewServer(h.Web())
	t.Cleanup(srv.Close)
	for _, v := range []string{"deployment-one", "deployment-two"} {
		d, errs := deployFiles(t, h, greetVersion(v), v)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		converge(t, d.Number, h.Host)

		tools := listTools(t, srv.URL+"/mcp")
		if got := tools["greet"]; got == nil || !strings.Contains(got.Description, v) {
			t.Fatalf("after deploying %s /mcp lists %v, want the greet tool of %s", v, tools, v)
		}
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/functions/greet", nil)
		req.Header.Set("Accept", "text/html")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(page), "hello-from-"+v) || !strings.Contains(string(page), `class="source`) {
			t.Fatalf("after deploying %s the function page answers %d without its source:\n%.2000s", v, res.StatusCode, page)
		}
	}
}

// listTools lists /mcp's tools with the Go SDK's client (a loopback request: no token needed).
func listTools(t *testing.T, url string) map[string]*sdk.Tool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := sdk.NewClient(&sdk.Implementation{Name: "system-test", Version: "1.0"}, nil)
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	defer cs.Close()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	out := map[string]*sdk.Tool{}
	for _, tl := range res.Tools {
		out[tl.Name] = tl
	}
	return out
}
