package main

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/testkit/testwait"
)

// TestMQTTDevices runs examples/flows/mqtt-sensors as its README says, with Debian's
// mosquitto clients: a device's login (host users add --topics) publishes a reading with QoS 1,
// the function listening on sensors.> runs, and its alert reaches an MQTT subscriber. A wrong
// password is refused at CONNECT; a publish outside the login's topics runs nothing. A reading
// whose run is under way when the host crashes runs once after the restart.
func TestMQTTDevices(t *testing.T) {
	requireMosquitto(t)
	mqttAddr := freeAddr(t)
	v := newEventEnv(t, "../../examples/flows/mqtt-sensors", "slow.>", "--mqtt-listen", mqttAddr)
	host, port, _ := strings.Cut(mqttAddr, ":")
	token := v.addLogin(t, "room1", "sensors/#,alerts/#,slow/#")
	login := []string{"-h", host, "-p", port, "-u", "room1", "-P", token}
	pub := func(password, topic, msg string, qos string) (string, error) {
		args := append([]string{"-h", host, "-p", port, "-u", "room1", "-P", password}, "-q", qos, "-t", topic, "-m", msg)
		out, err := exec.Command("mosquitto_pub", args...).CombinedOutput()
		return string(out), err
	}

	// The subscriber is there once it hears a probe the hosts publish; then the reading.
	var subOut syncBuffer
	sub := exec.Command("mosquitto_sub", append(login, "-q", "1", "-t", "alerts/#", "-v")...)
	sub.Stdout, sub.Stderr = &subOut, &subOut
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Process.Kill(); sub.Wait() })
	testwait.For(t, "mosquitto_sub to subscribe", time.Minute, func() error {
		v.hosts.Publish("alerts.probe", []byte("probe"))
		if !strings.Contains(subOut.String(), "alerts/probe probe") {
			return errNotYet(subOut.String(), nil)
		}
		return nil
	})
	sent := time.Now()
	if out, err := pub(token, "sensors/room1/temp", `{"room":"room1","celsius":31.5}`, "1"); err != nil {
		t.Fatalf("mosquitto_pub -q 1: %v\n%s", err, out)
	}
	testwait.For(t, "the alert to reach the MQTT subscriber", 2*time.Minute, func() error {
		if !strings.Contains(subOut.String(), `alerts/high {"room":"room1","celsius":31.5,"alert":true}`) {
			return errNotYet(subOut.String(), nil)
		}
		return nil
	})
	t.Logf("mosquitto_pub to the alert at mosquitto_sub: %s (a cold python run included)", time.Since(sent).Round(time.Millisecond))
	v.succeeded(t, "temperature", `"celsius":31.5`)

	// Without rights: a wrong password is refused at CONNECT; a publish outside the login's
	// topics (another topic, a function's own subject) is dropped by the server.
	if out, err := pub("wrong", "sensors/room1/temp", `{"room":"x","celsius":99}`, "1"); err == nil || !strings.Contains(out, "not authorised") {
		t.Errorf("mosquitto_pub with a wrong password: %v\n%s", err, out)
	}
	pub(token, "other/x", `{"room":"other","celsius":50}`, "1")
	pub(token, "agent/run/temperature", `{"room":"forged","celsius":50}`, "1")
	v.waitLog(t, "Publish Violation", `"other.x`)
	v.waitLog(t, "Publish Violation", `"agent.run.temperature`)
	// A reading sent after them is the barrier: once it ran, they would have too.
	pub(token, "sensors/room2/temp", `{"room":"room2","celsius":12}`, "2")
	v.succeeded(t, "temperature", `"room2"`)
	if rs := v.runs(t, "temperature", nil); len(rs) != 2 {
		t.Errorf("temperature ran %d times, want 2 (room1 at QoS 1, room2 at QoS 2): the refused publishes must run nothing", len(rs))
	}

	// A reading whose run is under way when the host dies runs once, after the restart.
	if out, err := pub(token, "slow/1", `{"n":1}`, "1"); err != nil {
		t.Fatalf("mosquitto_pub slow/1: %v\n%s", err, out)
	}
	v.crashDuringGate(t, "1")
}

// TestServeMQTTRefusals: --mqtt-listen needs the embedded server, and a non-loopback one
// authorization, as --nats-listen does; each refusal names the way out.
func TestServeMQTTRefusals(t *testing.T) {
	e := newExposureEnv(t, nil)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--nats", "nats://127.0.0.1:1", "--mqtt-listen", freeAddr(t)}, "put an mqtt { listen: ... } block (and a server_name) in that server's configuration"},
		{[]string{"--nats-listen", freeAddr(t), "--mqtt-listen", "0.0.0.0:" + port(t)}, "refusing to serve NATS MQTT on 0.0.0.0"},
		{[]string{"--nats-listen", freeAddr(t), "--s3-events-subject", "s3.>"}, "--s3-events-subject \"s3.>\": want one NATS subject without wildcards"},
	} {
		_, errOut, code := runIn(t, e.env, e.serveArgs(append(c.args, "--http", freeAddr(t))...)...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("serve %v: exit %d, want a refusal saying %q:\n%s", c.args, code, c.want, errOut)
		}
	}
}
