from django.db import migrations, models


class Migration(migrations.Migration):
    """Rows carry the token ids and the tensors' size, so a restart indexes blocks from rows alone.
    Rows made before have neither; the cold tier re-reads those blocks' headers at start."""

    dependencies = [
        ("omlx_cache", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="cacheblock",
            name="token_ids",
            field=models.TextField(default=""),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="cacheblock",
            name="kv_bytes",
            field=models.BigIntegerField(default=0),
            preserve_default=False,
        ),
    ]
