package controllerapp

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/controller"
)

// pusher pushes an agent's desired exports back after the PillarAgent
// reconciler saw a new agent instance (a restart, a storage-node reboot,
// or the first contact), retrying with backoff until every volume is
// restored. One push per agent runs at a time; a signal during a push
// runs it once more afterwards. It runs on the leader only.
type pusher struct {
	svc      *controller.Service
	client   client.Reader
	recorder events.EventRecorder
	log      *slog.Logger
	signals  chan string

	mu      sync.Mutex
	running map[string]bool
	again   map[string]bool
}

func newPusher(log *slog.Logger) *pusher {
	return &pusher{log: log, signals: make(chan string, 1024), running: map[string]bool{}, again: map[string]bool{}}
}

// notify never blocks: a full queue means pushes are pending anyway.
func (p *pusher) notify(agent string) {
	select {
	case p.signals <- agent:
	default:
	}
}

func (p *pusher) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case name := <-p.signals:
			p.mu.Lock()
			if p.running[name] {
				p.again[name] = true
				p.mu.Unlock()
				continue
			}
			p.running[name] = true
			p.mu.Unlock()
			wg.Go(func() { p.run(ctx, name) })
		}
	}
}

func (p *pusher) run(ctx context.Context, name string) {
	for {
		p.pushUntilDone(ctx, name)
		p.mu.Lock()
		if !p.again[name] || ctx.Err() != nil {
			delete(p.running, name)
			delete(p.again, name)
			p.mu.Unlock()
			return
		}
		delete(p.again, name)
		p.mu.Unlock()
	}
}

func (p *pusher) pushUntilDone(ctx context.Context, name string) {
	delay := time.Second
	for ctx.Err() == nil {
		res, err := p.svc.PushExports(ctx, name)
		if err == nil {
			p.report(ctx, name, res)
			if res.Done() {
				return
			}
		} else {
			p.log.Warn("pushing desired exports failed", "agent", name, "error", err, "retry_in", delay.String())
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Minute)
	}
}

// report records the push on the PillarAgent.
func (p *pusher) report(ctx context.Context, name string, res controller.Pushed) {
	var a v1alpha1.PillarAgent
	if err := p.client.Get(ctx, client.ObjectKey{Name: name}, &a); err != nil || p.recorder == nil {
		return
	}
	if len(res.Restored) > 0 || res.Done() {
		p.recorder.Eventf(&a, nil, corev1.EventTypeNormal, v1alpha1.ReasonExportsPushed, "Recover",
			"pushed the desired exports of %d volume(s) to the agent", len(res.Restored))
	}
	if len(res.Failed) > 0 {
		var parts []string
		for id, why := range res.Failed {
			parts = append(parts, id+": "+why)
		}
		p.recorder.Eventf(&a, nil, corev1.EventTypeWarning, v1alpha1.ReasonExportsNotRestored, "Recover",
			"%d export(s) could not be restored, retrying: %s", len(res.Failed), strings.Join(parts, "; "))
	}
	if len(res.Retained) > 0 {
		p.recorder.Eventf(&a, nil, corev1.EventTypeWarning, v1alpha1.ReasonExportsRetained, "Recover",
			"the agent keeps pillar-csi subsystems no PillarVolumeState names: %s; if their volumes are gone, delete the subsystems on the storage node",
			strings.Join(res.Retained, ", "))
	}
}

func (p *pusher) NeedLeaderElection() bool { return true }
