package people

import (
	"strings"
	"testing"
)

func TestTopicSubject(t *testing.T) {
	for in, want := range map[string]string{
		"sensors/#":        "sensors.>",
		"sensors/+/temp":   "sensors.*.temp",
		"sensors.>":        "sensors.>",
		"s3.events":        "s3.events",
		" devices/room1/x": "devices.room1.x",
	} {
		if got, err := TopicSubject(in); err != nil || got != want {
			t.Errorf("TopicSubject(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, why := range map[string]string{
		"#":              "starts with a wildcard",
		"+/temp":         "starts with a wildcard",
		"agent/run/x":    "hosts keep for themselves",
		"webhook.github": "hosts keep for themselves",
		"$JS.API.>":      "hosts keep for themselves",
		"_INBOX_hosts.>": "hosts keep for themselves",
		"sensors/#/x":    "is not a subject",
		"sensors.room/1": "mixes MQTT",
		"sensors..x":     "is not a subject",
		"sensors.te*":    "is not a subject",
	} {
		if _, err := TopicSubject(in); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("TopicSubject(%q) = %v, want an error saying %q", in, err, why)
		}
	}
	if err := (User{Name: "dev", Role: Viewer, Topics: []string{"agent.>"}}).Check(); err == nil || !strings.Contains(err.Error(), "--topics") {
		t.Errorf("Check of a user with topic agent.>: %v", err)
	}
}
