-- The channel program of Backend.Delete and Backend.DeleteSnapshot. It runs
-- in the pool's syncing context, so nothing can change a dataset between
-- its checks and the destroy.
--
-- zfs program [-j] POOL - MODE DATASET OWNERPROP ID VOLPROP SNAPPROP CLONEPROP
--
-- MODE volume: DATASET is a zvol that OWNERPROP (VOLPROP) must name ID.
-- Without snapshots it is destroyed. With snapshots of ours that
-- something still needs (a user's snapshot, SNAPPROP; the origin of a
-- clone) it is kept, marked deleted (VOLPROP = "deleted:" .. ID), and
-- destroyed with the last of them. A snapshot the backend did not make
-- (an operator's, a replication tool's) is never touched and refuses
-- the delete. MODE snapshot: DATASET is VOLUME@SNAP, whose OWNERPROP
-- (SNAPPROP, or CLONEPROP for a clone's own snapshot) must name ID, set
-- on it and not inherited; it is destroyed, or, while clones need it,
-- marked for deferred destruction (zfs destroy -d), which ZFS carries out
-- with the last clone.
--
-- After every destroy the program reaps: a zvol marked deleted whose last
-- needed snapshot went is destroyed, and so on up its chain of origins.
-- A snapshot the backend took only to clone a volume (CLONEPROP set) and
-- one of ours marked for deferred destruction are not needed once they
-- have no clone; the program destroys them when it meets them (a held one
-- stays, and keeps its volume).
--
-- It returns a word, then a tab and a detail for some:
--   destroyed          the dataset is gone
--   deferred           kept, marked deleted or for deferred destruction,
--                      until what needs it is gone
--   absent             there is no such dataset
--   other TYPE         the dataset is not a volume (a snapshot)
--   foreign OWNER      OWNERPROP holds OWNER (empty when unset)
--   snapshots          a snapshot the backend did not make is there
--   failed ERRNO       a destroy failed (EBUSY: the zvol is open)
local argv = (...)["argv"]
local mode, ds, prop, id, volprop, snapprop, cloneprop = argv[1], argv[2], argv[3], argv[4], argv[5], argv[6], argv[7]

local DELETED = "deleted:"

-- set reports whether a user property has a value.
local function set(v)
	return v ~= nil and v ~= "" and v ~= "-"
end

-- localprop returns a user property of ds when it is set on ds itself,
-- not inherited (a value set on the parent is no mark of ours), else nil.
local function localprop(ds, p)
	local v, setpoint = zfs.get_prop(ds, p)
	if set(v) and setpoint == ds then
		return v
	end
	return nil
end

local function hasclones(snap)
	for _ in zfs.list.clones(snap) do
		return true
	end
	return false
end

-- deferred reports whether a snapshot is marked for deferred destruction.
local function deferred(snap)
	local d = zfs.get_prop(snap, "defer_destroy")
	return d == 1 or d == true or d == "on"
end

-- ours reports whether the backend made a snapshot: a user's snapshot
-- (SNAPSHOTPROP) or one taken for a clone (CLONEPROP).
local function ours(snap)
	return localprop(snap, snapprop) ~= nil or localprop(snap, cloneprop) ~= nil
end

-- unneeded: a snapshot of ours no volume needs any more, which the
-- backend may destroy: taken only for a clone, or marked for deferred
-- destruction, and without clones now.
local function unneeded(snap)
	if not ours(snap) or hasclones(snap) then
		return false
	end
	return localprop(snap, cloneprop) ~= nil or deferred(snap)
end

-- prune destroys the unneeded snapshots of vol and reports what is left:
-- "foreign" when a snapshot the backend did not make is there (it is
-- never touched, and it blocks the delete), "ours" when only snapshots
-- of ours are left that something needs (or that could not be destroyed,
-- a held one), nil when none.
local function prune(vol)
	local gone = {}
	local left = nil
	for snap in zfs.list.snapshots(vol) do
		if not ours(snap) then
			return "foreign"
		elseif unneeded(snap) then
			table.insert(gone, snap)
		else
			left = "ours"
		end
	end
	for _, snap in ipairs(gone) do
		if zfs.sync.destroy(snap) ~= 0 then
			left = "ours"
		end
	end
	return left
end

local function name(vol)
	return string.match(vol, "([^/]+)$")
end

-- reap destroys, from the volume of the snapshot origin up the chain of
-- origins, each zvol marked deleted that nothing needs any more.
local function reap(origin)
	while set(origin) do
		local vol = string.match(origin, "^(.*)@")
		if vol == nil or not zfs.exists(vol) then
			return
		end
		if zfs.get_prop(vol, volprop) ~= DELETED .. name(vol) then
			return
		end
		if prune(vol) ~= nil then
			return
		end
		origin = zfs.get_prop(vol, "origin")
		if zfs.sync.destroy(vol) ~= 0 then
			return
		end
	end
end

if not zfs.exists(ds) then
	return "absent"
end
local kind = zfs.get_prop(ds, "type")

if mode == "snapshot" then
	if kind ~= "snapshot" then
		return "other\t" .. tostring(kind)
	end
	local owner = localprop(ds, prop)
	if owner ~= id then
		return "foreign\t" .. (owner or "")
	end
	local clones = hasclones(ds)
	local err = zfs.sync.destroy({ ds, defer = true })
	if err ~= 0 then
		return "failed\t" .. err
	end
	reap(ds)
	if clones then
		return "deferred"
	end
	return "destroyed"
end

if kind ~= "volume" then
	return "other\t" .. tostring(kind)
end
local owner = zfs.get_prop(ds, prop)
if owner == DELETED .. id then
	reap(ds .. "@")
	return "deferred"
end
if owner ~= id then
	return "foreign\t" .. (owner or "")
end
local left = prune(ds)
if left == "foreign" then
	return "snapshots"
end
if left ~= nil then
	local err = zfs.sync.set_prop(ds, prop, DELETED .. id)
	if err ~= 0 then
		return "failed\t" .. err
	end
	return "deferred"
end
local origin = zfs.get_prop(ds, "origin")
local err = zfs.sync.destroy(ds)
if err ~= 0 then
	return "failed\t" .. err
end
reap(origin)
return "destroyed"
