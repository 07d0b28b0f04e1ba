-- What a script set aside, as it returns it (see README.md): {dead: per job
-- the id then the 13 JOB_FIELDS as stored afterwards, quarantined: per entry
-- the id then the reason, newer: per record the id then v}.
local function new_aside() return {{}, {}, {}} end
