-- The channel program of Backend.Delete: destroys the zvol DATASET if, and
-- only if, it is a volume whose owner property PROPERTY holds ID. It runs
-- in the pool's syncing context, so nothing can change the zvol between
-- these checks and the destroy. It returns a word, then a tab and a
-- detail for some:
--   destroyed          the zvol is gone
--   absent             there is no such dataset
--   other TYPE         the dataset is not a volume
--   foreign OWNER      the owner property holds OWNER (empty when unset)
--   snapshots          the zvol has snapshots (and maybe clones)
--   failed ERRNO       the destroy failed (EBUSY: the zvol is open)
--
-- zfs program [-j] POOL - DATASET PROPERTY ID, with this file on stdin.
local argv = (...)["argv"]
local ds, prop, id = argv[1], argv[2], argv[3]

if not zfs.exists(ds) then
	return "absent"
end
local kind = zfs.get_prop(ds, "type")
if kind ~= "volume" then
	return "other\t" .. tostring(kind)
end
local owner = zfs.get_prop(ds, prop)
if owner ~= id then
	return "foreign\t" .. (owner or "")
end
for _ in zfs.list.snapshots(ds) do
	return "snapshots"
end
local err = zfs.sync.destroy(ds)
if err ~= 0 then
	return "failed\t" .. err
end
return "destroyed"
