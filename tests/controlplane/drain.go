package main

// controlplane drain-verdicts: kubectl drain's own pod filters (k8s.io/kubectl/pkg/drain, the code behind
// `kubectl drain`) as an oracle for the project's drain rules (functions/rollout/drain.py).
//
// stdin, one JSON object a line: {"id": "...", "pods": [Pod...], "daemonsets": [DaemonSet...],
// "options": [{"force": bool, "deleteEmptyDirData": bool}...]}. For each pod and each options entry the
// drain helper, with --ignore-daemonsets (the project always leaves DaemonSet pods), decides alone on that
// pod; stdout, one line per input line: {"id": ..., "verdicts": [{"ns/name": {"verdict": "delete" | "skip" |
// "error", "message": ...}}...]} (one map per options entry). The drain helper's client is a real clientset
// over an in-memory transport (memoryAPI) that answers its two calls, the pod list and the DaemonSet read:
// nothing here talks to a server. (client-go's fake clientset would do too, for 23 MB more binary.)

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/kubectl/pkg/drain"
)

const oracleLabel = "drain-oracle.test/pod"

type drainCase struct {
	ID         string             `json:"id"`
	Pods       []corev1.Pod       `json:"pods"`
	DaemonSets []appsv1.DaemonSet `json:"daemonsets"`
	Options    []drainCaseOptions `json:"options"`
}

type drainCaseOptions struct {
	Force              bool `json:"force"`
	DeleteEmptyDirData bool `json:"deleteEmptyDirData"`
}

type drainVerdict struct {
	Verdict string `json:"verdict"`
	Message string `json:"message,omitempty"`
}

func drainVerdicts(in io.Reader, out io.Writer) error {
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 1<<20), 64<<20)
	enc := json.NewEncoder(out)
	for scanner.Scan() {
		var c drainCase
		if err := json.Unmarshal(scanner.Bytes(), &c); err != nil {
			return fmt.Errorf("input: %w", err)
		}
		api := &memoryAPI{daemonSets: map[string]*appsv1.DaemonSet{}}
		for i := range c.Pods {
			// GetPodsForDeletion lists the node's pods by label selector: one pod a call, picked by this label.
			pod := c.Pods[i].DeepCopy()
			if pod.Labels == nil {
				pod.Labels = map[string]string{}
			}
			pod.Labels[oracleLabel] = strconv.Itoa(i)
			api.pods = append(api.pods, pod)
		}
		for i := range c.DaemonSets {
			ds := &c.DaemonSets[i]
			api.daemonSets[ds.Namespace+"/"+ds.Name] = ds
		}
		client, err := kubernetes.NewForConfigAndClient(&rest.Config{Host: "http://oracle.invalid", QPS: -1}, // no client-side rate limit
			&http.Client{Transport: api})
		if err != nil {
			return err
		}
		result := map[string]any{"id": c.ID}
		var all []map[string]drainVerdict
		for _, opt := range c.Options {
			verdicts := map[string]drainVerdict{}
			for i, pod := range c.Pods {
				helper := &drain.Helper{
					Ctx:                 context.Background(),
					Client:              client,
					Force:               opt.Force,
					DeleteEmptyDirData:  opt.DeleteEmptyDirData,
					IgnoreAllDaemonSets: true,
					PodSelector:         oracleLabel + "=" + strconv.Itoa(i),
					Out:                 io.Discard,
					ErrOut:              io.Discard,
				}
				list, errs := helper.GetPodsForDeletion("oracle-node")
				v := drainVerdict{Verdict: "skip"}
				switch {
				case len(errs) > 0:
					msgs := make([]string, len(errs))
					for j, e := range errs {
						msgs[j] = e.Error()
					}
					v = drainVerdict{Verdict: "error", Message: strings.Join(msgs, "; ")}
				case list != nil && len(list.Pods()) == 1:
					v = drainVerdict{Verdict: "delete", Message: list.Warnings()}
				case list != nil:
					v.Message = list.Warnings()
				}
				verdicts[pod.Namespace+"/"+pod.Name] = v
			}
			all = append(all, verdicts)
		}
		result["verdicts"] = all
		if err := enc.Encode(result); err != nil {
			return err
		}
	}
	return scanner.Err()
}

// memoryAPI answers the drain helper's calls from memory: GET /api/v1/pods?labelSelector=<oracleLabel>=<i>
// (the one pod) and GET /apis/apps/v1/namespaces/<ns>/daemonsets/<name> (found or 404 NotFound).
type memoryAPI struct {
	pods       []*corev1.Pod
	daemonSets map[string]*appsv1.DaemonSet
}

func (m *memoryAPI) RoundTrip(req *http.Request) (*http.Response, error) {
	var body any
	status := http.StatusOK
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case req.Method == http.MethodGet && req.URL.Path == "/api/v1/pods":
		list := &corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
		want := strings.TrimPrefix(req.URL.Query().Get("labelSelector"), oracleLabel+"=")
		for _, pod := range m.pods {
			if pod.Labels[oracleLabel] == want {
				list.Items = append(list.Items, *pod)
			}
		}
		body = list
	case req.Method == http.MethodGet && len(parts) == 7 && parts[5] == "daemonsets":
		if ds, ok := m.daemonSets[parts[4]+"/"+parts[6]]; ok {
			out := ds.DeepCopy()
			out.TypeMeta = metav1.TypeMeta{Kind: "DaemonSet", APIVersion: "apps/v1"}
			body = out
		} else {
			gone := apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: "daemonsets"}, parts[6])
			status, body = http.StatusNotFound, &gone.ErrStatus
		}
	default:
		return nil, fmt.Errorf("drain-verdicts: unexpected call %s %s", req.Method, req.URL)
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader(data)), Request: req}, nil
}

func init() {
	subcommands["drain-verdicts"] = func() error { return drainVerdicts(os.Stdin, os.Stdout) }
}
