package leader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Timings of the election, controller-runtime's defaults.
const (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

// Elector campaigns for one Lease. Synchronisation model: Start runs the campaign on its
// own goroutine and closes elected, once, when this replica first leads; any goroutine
// may wait on it.
type Elector struct {
	lock    resourcelock.Interface
	elected chan struct{}
}

var (
	_ manager.Runnable               = (*Elector)(nil)
	_ manager.LeaderElectionRunnable = (*Elector)(nil)
)

// New returns an Elector for the Lease namespace/name on the API server of cfg, with
// this process's host name (and a unique suffix) as its identity.
func New(cfg *rest.Config, namespace, name string) (*Elector, error) {
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("leader election identity: %w", err)
	}
	id := fmt.Sprintf("%s_%d_%d", host, os.Getpid(), time.Now().UnixNano())
	lock, err := resourcelock.NewFromKubeconfig(resourcelock.LeasesResourceLock, namespace, name,
		resourcelock.ResourceLockConfig{Identity: id}, cfg, renewDeadline)
	if err != nil {
		return nil, fmt.Errorf("leader election lock %s/%s: %w", namespace, name, err)
	}
	return &Elector{lock: lock, elected: make(chan struct{})}, nil
}

// NeedLeaderElection reports false: the Elector runs on every replica, to campaign.
func (e *Elector) NeedLeaderElection() bool { return false }

// Start campaigns until ctx ends, then releases the Lease if it holds it and returns nil.
// It returns an error if this replica loses the Lease while ctx is live, so that the
// process stops rather than act as a leader it no longer is.
func (e *Elector) Start(ctx context.Context) error {
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            e.lock,
		LeaseDuration:   leaseDuration,
		RenewDeadline:   renewDeadline,
		RetryPeriod:     retryPeriod,
		ReleaseOnCancel: true,
		Name:            e.lock.Describe(),
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				log.FromContext(ctx).Info("Elected leader", "lease", e.lock.Describe(), "identity", e.lock.Identity())
				close(e.elected)
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	le.Run(ctx) // returns when ctx ends or the Lease is lost
	if ctx.Err() == nil {
		return errors.New("leader election lost: " + e.lock.Describe())
	}
	return nil
}

// WaitElected blocks until this replica leads or ctx ends, returning ctx's error then.
func (e *Elector) WaitElected(ctx context.Context) error {
	select {
	case <-e.elected:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait to be elected leader: %w", ctx.Err())
	}
}
