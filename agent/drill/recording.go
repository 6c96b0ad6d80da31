package drill

import (
	"context"

	tdrill "github.com/selftaint/selftaint/taints/drill"
)

// recording is the recorder's side the runner uses: what it saw so far.
type recording interface {
	Record() tdrill.Record
}

// startRecording starts watching what the expectations judge (the
// recorder, agent/drill/record*.go), its change lines going to the view.
func (r *runner) startRecording(ctx context.Context) error {
	return nil
}
