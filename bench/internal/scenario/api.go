package scenario

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// maxUsersPerCall is how many users one CreateGroup or AddGroupMembers
// takes (logic's group.MaxUsersPerCall, docs/decisions.md 31): larger
// groups are filled by several calls, as a business server would.
const maxUsersPerCall = 500

// api is a business-API client of the system under test: the group
// scenario creates its users and groups the way a business server does,
// through logic.v1.Api with the cluster's API key, never in MySQL behind
// logic's back.
type api struct {
	cc  *grpc.ClientConn
	cli logicv1.ApiClient
	key string
}

func (e *Env) dialAPI() (*api, error) {
	cc, err := grpc.NewClient(e.C.LogicAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("scenario: dial logic api: %w", err)
	}
	return &api{cc: cc, cli: logicv1.NewApiClient(cc), key: e.C.APIKey}, nil
}

func (a *api) close() { _ = a.cc.Close() }

// ctx adds the API key to a call's context.
func (a *api) ctx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-api-key", a.key)
}

// ensureUsers creates a user row for every id with UpsertUser (group
// members must exist, and members who never come online never AUTH), with
// conc calls in flight.
func (a *api) ensureUsers(ctx context.Context, ids []int64, conc int) error {
	ctx, cancel := context.WithCancel(a.ctx(ctx))
	defer cancel()
	work := make(chan int64)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				if _, err := a.cli.UpsertUser(ctx, &logicv1.UpsertUserRequest{UserId: id}); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("scenario: UpsertUser %d: %w", id, err)
						cancel()
					}
					mu.Unlock()
				}
			}
		}()
	}
feed:
	for _, id := range ids {
		select {
		case work <- id:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if first != nil {
		return first
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("scenario: create users: %w", err)
	}
	return nil
}

// memberChunks splits the members other than the owner into the user
// lists of one CreateGroup (the owner counts against its limit) and the
// AddGroupMembers calls after it.
func memberChunks(members []int64, perCall int) (create []int64, adds [][]int64) {
	n := min(len(members), perCall-1)
	create = members[:n]
	for rest := members[n:]; len(rest) > 0; {
		k := min(len(rest), perCall)
		adds = append(adds, rest[:k])
		rest = rest[k:]
	}
	return create, adds
}

// createGroup creates a group of owner and members through the API and
// returns it as the last call left it.
func (a *api) createGroup(ctx context.Context, owner int64, members []int64, name string) (*logicv1.Group, error) {
	ctx = a.ctx(ctx)
	create, adds := memberChunks(members, maxUsersPerCall)
	r, err := a.cli.CreateGroup(ctx, &logicv1.CreateGroupRequest{OwnerId: owner, MemberIds: create, Name: name})
	if err != nil {
		return nil, fmt.Errorf("scenario: CreateGroup: %w", err)
	}
	g := r.GetGroup()
	for _, ids := range adds {
		r, err := a.cli.AddGroupMembers(ctx, &logicv1.ChangeGroupMembersRequest{OperatorId: owner, GroupId: g.GetGroupId(), UserIds: ids})
		if err != nil {
			return nil, fmt.Errorf("scenario: AddGroupMembers to %d: %w", g.GetGroupId(), err)
		}
		g = r.GetGroup()
	}
	if int(g.GetMemberCount()) != len(members)+1 {
		return nil, fmt.Errorf("scenario: group %d has %d members, want %d", g.GetGroupId(), g.GetMemberCount(), len(members)+1)
	}
	return g, nil
}
